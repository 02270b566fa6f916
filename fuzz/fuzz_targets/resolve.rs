#![no_main]
// Harness and invariants: husk::fuzz::resolve::in_memory (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::resolve::in_memory(data));

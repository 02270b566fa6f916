#![no_main]
// Harness and invariants: husk_fuzz::resolve::in_memory (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::resolve::in_memory(data));

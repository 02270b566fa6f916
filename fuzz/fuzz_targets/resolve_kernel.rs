#![no_main]
// Harness and invariants: husk::fuzz::resolve::against_kernel (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::resolve::against_kernel(data));

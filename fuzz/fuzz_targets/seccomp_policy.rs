#![no_main]
// Harness and invariants: husk_fuzz::seccomp::generated_policy (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::seccomp::generated_policy(data));

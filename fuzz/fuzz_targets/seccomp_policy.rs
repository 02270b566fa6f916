#![no_main]
// Harness and invariants: husk::fuzz::seccomp::generated_policy (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::seccomp::generated_policy(data));

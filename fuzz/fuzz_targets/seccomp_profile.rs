#![no_main]
// Harness and invariants: husk::fuzz::seccomp::profile_json (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::seccomp::profile_json(data));

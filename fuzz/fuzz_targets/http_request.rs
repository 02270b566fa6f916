#![no_main]
// Harness and invariants: husk_fuzz::http::request (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::http::request(data));

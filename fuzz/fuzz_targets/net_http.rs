#![no_main]
// Harness and invariants: husk_fuzz::net::http_head (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::net::http_head(data));

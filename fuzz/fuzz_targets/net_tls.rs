#![no_main]
// Harness and invariants: husk_fuzz::net::client_hello (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::net::client_hello(data));

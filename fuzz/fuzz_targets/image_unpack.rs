#![no_main]
// Harness and invariants: husk_fuzz::image::unpack (tests/fuzz-harness/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk_fuzz::image::unpack(data));

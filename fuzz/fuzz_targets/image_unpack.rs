#![no_main]
// Harness and invariants: husk::fuzz::image::unpack (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::image::unpack(data));

#![no_main]
// Harness and invariants: husk::fuzz::units::units (src/fuzz/).
libfuzzer_sys::fuzz_target!(|data: &[u8]| husk::fuzz::units::units(data));

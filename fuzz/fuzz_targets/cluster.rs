//! cargo-fuzz target; the property is [`convoy_fuzz_targets::cluster`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| convoy_fuzz_targets::cluster(data));

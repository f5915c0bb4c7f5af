//! cargo-fuzz target; the property is [`convoy_fuzz_targets::schedule`].
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| convoy_fuzz_targets::schedule(data));

//! Identify Controller and Identify Namespace data.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_identify(data) {
        panic!("{why}");
    }
});

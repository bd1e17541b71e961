//! Discovery log pages (header and entries).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_discovery_log(data) {
        panic!("{why}");
    }
});

//! NVMe completion queue entries and their status field.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_completion(data) {
        panic!("{why}");
    }
});

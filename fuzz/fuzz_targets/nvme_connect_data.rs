//! Fabrics Connect data (host id, controller id, NQNs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_connect_data(data) {
        panic!("{why}");
    }
});

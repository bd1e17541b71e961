//! Whole x-amz-rdma-* header sets of PREPARE, READY and CANCEL.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::hipobj_headers(data) {
        panic!("{why}");
    }
});

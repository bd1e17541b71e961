//! NVMe/RDMA CM private data (request, accept, reject).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_cm_private(data) {
        panic!("{why}");
    }
});

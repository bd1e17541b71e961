//! InfiniBand CM MADs (REQ, MRA, REJ, REP, RTU, DREQ, DREP) and the CMA
//! header of IP-addressed REQs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::cm_mad(data) {
        panic!("{why}");
    }
});

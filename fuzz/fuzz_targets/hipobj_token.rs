//! hipobj-rc-v2 PREPARE tokens (88 hex, :addr:size suffix).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::hipobj_token(data) {
        panic!("{why}");
    }
});

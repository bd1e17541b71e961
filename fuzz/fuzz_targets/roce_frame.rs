//! RoCEv2 frames: decode, re-encode, ICRC and IP-level decode agree.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::roce_frame(data) {
        panic!("{why}");
    }
});

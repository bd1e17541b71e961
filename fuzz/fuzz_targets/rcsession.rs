//! The RC session manager under arbitrary call sequences (PREPARE, staging,
//! READY, CANCEL, PUT views, forged handles, the reaper, time): limits hold
//! after every call and everything drains at the end.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_sim::fuzzing_rcsession::session_calls(data) {
        panic!("{why}");
    }
});

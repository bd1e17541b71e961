//! The engine's CM receive path (QP1 MADs, mutated from real ones, with
//! time passing and the application answering): no panic, no connection
//! or QP without a request, no timer left once every retry ran out.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_engine::fuzzing::cm_receive(data) {
        panic!("{why}");
    }
});

//! librcserver's C entry points under arbitrary calls and argument structs
//! (NULL pointers, strings of any bytes, NULL with a length, forged and
//! stale handles): no panic, no RC_E_INTERNAL, and every session made ends
//! exactly once. Needs a device: fuzz/smoke.sh runs it with rctb's
//! libibverbs.so.1 on LD_LIBRARY_PATH and RCTB_IBV_ADDR set.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rcserver::fuzzing::abi_calls(data) {
        panic!("{why}");
    }
});

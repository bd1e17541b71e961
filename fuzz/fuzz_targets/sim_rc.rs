//! The simulator's RC engine against the reference model: operation
//! sequences and fault mixes drawn from the fuzzer's bytes
//! (`Case::decode`, via `arbitrary::Unstructured`), then, on the bytes past
//! a case's eighth operation, a verbs program of shared receive queues,
//! small CQs and asynchronous events (`Program`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_sim::fuzzing::sim_rc(data) {
        panic!("{why}");
    }
});

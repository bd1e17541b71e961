//! The simulator's RC engine against the reference model: operation
//! sequences and fault mixes drawn from the fuzzer's bytes
//! (`Case::from_bytes`, via `arbitrary::Unstructured`).
#![no_main]

use rctb_sim::fuzzing::{Case, run};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some(case) = Case::from_bytes(data)
        && let Err(why) = run(&case)
    {
        panic!("{why}\ncase: {case:?}");
    }
});

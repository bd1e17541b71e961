//! The surf metadata bus (MetaDataTx / MetaDataRx register words).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::surf_metadata(data) {
        panic!("{why}");
    }
});

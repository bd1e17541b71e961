//! The CRC64NVME checksum header.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::hipobj_checksum(data) {
        panic!("{why}");
    }
});

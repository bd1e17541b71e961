//! NVMe submission queue entries, raw and typed (admin and I/O queues).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_core::fuzzing::nvme_command(data) {
        panic!("{why}");
    }
});

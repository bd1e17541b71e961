//! Scenario files: parsing never panics; errors name a field.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Err(why) = rctb_scenario::fuzzing::scenario_toml(data) {
        panic!("{why}");
    }
});

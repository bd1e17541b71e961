//! A property of target decoding (docs/protocols.md §3a.2), over real HTTP and
//! RC on the simulator: any key made of allowed characters survives a PUT
//! then a GET byte for byte, whichever way each of its slashes is spelled
//! (`/`, `%2F` or `%2f`, chosen independently for the PUT and the GET),
//! and no key, `.` and `..` segments included, writes outside the store's
//! root. Failures print proptest's seed and minimal case (replay:
//! `PROPTEST_SEED`, or the regressions file).

mod common;

use bytes::Bytes;
use common::{Rig, RigOptions};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rctb_gateway::client::NoProgress;
use rctb_gateway::store::{ObjectPath, ObjectStore};

/// A key segment: characters a key may hold (spaces, punctuation, UTF-8
/// beyond ASCII, a literal `%`), or a `.`/`..` segment, which must be
/// refused wherever it appears.
fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "[a-zA-Z0-9 ._~!$'()*+,;=:@%&?#-]{1,10}",
        1 => "[éü中]{1,3}",
        1 => prop_oneof![Just(".".to_string()), Just("..".to_string())],
    ]
}

/// The key's target with each slash spelled as `spell` says.
fn spelled(key_segments: &[String], spell: &[u8]) -> String {
    let mut t = String::from("/bk/");
    for (i, seg) in key_segments.iter().enumerate() {
        if i > 0 {
            t.push_str(["/", "%2F", "%2f"][spell[i % spell.len()] as usize % 3]);
        }
        // Everything but ASCII letters and digits encoded, dots included,
        // so `..` arrives as `%2E%2E`.
        t.extend(utf8_percent_encode(seg, NON_ALPHANUMERIC));
    }
    t
}

#[test]
fn keys_survive_any_slash_spelling_and_never_escape_the_root() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let rig = rt.block_on(Rig::start(RigOptions::default()));
    let client = rig.client(0);
    let mut runner = TestRunner::new(Config { cases: 48, ..Config::default() });
    let strategy = (
        proptest::collection::vec(segment(), 1..5),
        proptest::collection::vec(0u8..3, 1..5),
        proptest::collection::vec(0u8..3, 1..5),
        proptest::collection::vec(any::<u8>(), 1..300),
    );
    let result = runner.run(&strategy, |(segments, put_spell, get_spell, data)| {
        let key = segments.join("/");
        let dotted = segments.iter().any(|s| s == "." || s == "..");
        let (put_t, get_t) = (spelled(&segments, &put_spell), spelled(&segments, &get_spell));
        rt.block_on(async {
            let put = client.put_target(put_t.clone(), Bytes::from(data.clone()), &NoProgress).await;
            if dotted {
                let e = put.expect_err("a . or .. segment must be refused");
                prop_assert_eq!(e.status(), Some(400), "{}: {}", put_t, e);
                return Ok(());
            }
            put.map_err(|e| TestCaseError::fail(format!("PUT {put_t}: {e}")))?;
            let (got, _) = client
                .get_target(get_t.clone(), 0, data.len() as u64, &NoProgress)
                .await
                .map_err(|e| TestCaseError::fail(format!("GET {get_t}: {e}")))?;
            prop_assert!(got == data, "{} then {}: GET differs from PUT", put_t, get_t);
            // The object is the key, slashes and all.
            let meta = rig.store.head(&ObjectPath::new("bk", &key).unwrap()).unwrap();
            prop_assert_eq!(meta.size, data.len() as u64);
            Ok(())
        })
    });
    if let Err(e) = result {
        panic!("{e} (rig seed {}; proptest prints its own seed above)", rig.seed);
    }
    // Nothing was ever written beside the store's root.
    let beside: Vec<String> =
        std::fs::read_dir(rig.dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(beside, ["root"]);
}

//! The in-process control plane, the config's defaults and the small
//! value types (written for the mutants of inproc.rs, config.rs and
//! types.rs, issue 39).

use super::rig::*;
use crate::hipobj::{RdmaToken, TOKEN_HEX_LEN};
use crate::transport::{Gid, QpTransition, WcStatus};
use crate::*;

#[test]
fn prepare_get_stages_the_object_and_publishes_and_refuses_a_put() {
    let mut m = server(ServerConfig::default());
    let r = inproc::prepare_get_versioned(&mut m, &prep(alice(), Op::Get, 5), b"hello", "e", "v1").unwrap();
    let s = &m.sessions()[0];
    assert_eq!((s.session, s.published, s.staged), (r.session, true, true));
    assert_eq!(m.t.mrs[&m.sessions[&r.session].staging.id].1, b"hello");
    assert_eq!(m.usage().stage_slots_free, 32, "the stage slot came back");
    m.ready(&ready_req(alice(), r.session, 0)).unwrap();
    assert_eq!(m.done_reply(&r.session).unwrap().version_id, "v1");
    let refused = inproc::prepare_get(&mut m, &prep(alice(), Op::Put, 5), b"hello", "e");
    assert_eq!(refused, Err(RcError::Arg { field: "op", rule: "prepare_get needs a GET" }));
    // An object that does not fill the size: SHORT, and the session goes.
    let short = inproc::prepare_get(&mut m, &prep(alice(), Op::Get, 6), b"hello", "e");
    assert_eq!(short, Err(RcError::Short { written: 5, expected: 6 }));
    assert_eq!(m.sessions().len(), 1);
}

#[test]
fn prepare_put_publishes_and_refuses_a_get() {
    let mut m = server(ServerConfig::default());
    let r = inproc::prepare_put(&mut m, &prep(alice(), Op::Put, 5)).unwrap();
    assert_eq!((m.sessions()[0].session, m.sessions()[0].published), (r.session, true));
    let refused = inproc::prepare_put(&mut m, &prep(alice(), Op::Get, 5));
    assert_eq!(refused, Err(RcError::Arg { field: "op", rule: "prepare_put needs a PUT" }));
}

#[test]
fn complete_put_returns_the_object_and_complete_get_ends_the_session() {
    let mut m = server(ServerConfig::default());
    let put = published_put(&mut m, alice(), 4);
    let t = start(&mut m, alice(), put);
    put_lands(&mut m, put, b"wxyz");
    finish(&mut m, t).unwrap();
    assert_eq!(inproc::complete_put(&mut m, &put).unwrap(), b"wxyz");
    assert!(m.sessions().is_empty());
    let get = staged_get(&mut m, alice(), b"ab");
    let t = start(&mut m, alice(), get);
    send_done(&mut m, get, WcStatus::Success);
    finish(&mut m, t).unwrap();
    inproc::complete_get(&mut m, &get).unwrap();
    assert!(m.sessions().is_empty());
}

#[test]
fn the_default_config_has_generous_limits_64_ready_and_32_stage_slots() {
    let m = server(ServerConfig::default());
    let l = m.config().limits;
    assert_eq!((l.max_sessions, l.max_staging_bytes, l.max_qps), (1024, 1 << 30, 1024));
    assert_eq!((l.max_user_sessions, l.max_user_staging_bytes, l.max_user_qps), (1024, 1 << 30, 0));
    assert_eq!((m.usage().ready_slots_free, m.usage().stage_slots_free), (64, 32));
    let m = server(ServerConfig { max_ready_slots: 3, max_stage_slots: 5, ..ServerConfig::default() });
    assert_eq!((m.usage().ready_slots_free, m.usage().stage_slots_free), (3, 5));
}

#[test]
fn port_0_is_taken_as_port_1() {
    let mut m = server(ServerConfig { port: 0, ..ServerConfig::default() });
    let id = published_put(&mut m, alice(), 4);
    let qp = qp_of(&m, id);
    let QpTransition::Init(init) = m.t.transitions(qp)[0] else { panic!() };
    assert_eq!(init.port, 1);
}

#[test]
fn a_handle_debugs_as_epoch_colon_nonce() {
    assert_eq!(format!("{:?}", Handle { epoch: 3, nonce: 17 }), "Handle(3:17)");
}

#[test]
fn the_reply_header_is_200_and_the_token_or_88_zeros() {
    let token = RdmaToken::rc(0x42, Gid::from_ipv4("10.0.0.1".parse().unwrap()), 1);
    let mut r = PrepareReply {
        session: SessionId(1),
        server_qpn: 0x42,
        server_psn: 0x42,
        staging_addr: 0,
        staging_rkey: 0,
        reply_token: Some(token),
    };
    assert_eq!(r.reply_header(), format!("200:{}", token.to_hex()));
    r.reply_token = None;
    assert_eq!(r.reply_header(), format!("200:{}", "0".repeat(TOKEN_HEX_LEN)));
    assert_eq!(TOKEN_HEX_LEN, 88);
}

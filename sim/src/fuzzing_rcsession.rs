//! The session manager driven by arbitrary call sequences (the structured
//! fuzz target `fuzz/fuzz_targets/rcsession.rs`; corpus replayed by
//! `sim/tests/fuzz_corpus.rs`). Not a stable API.
//!
//! Bytes become a limits/deadline configuration and then up to 96 calls
//! (PREPARE, finish_prepare, staging leases, READY control-plane-only or
//! towards a QP that does not exist, CANCEL, PUT views, finish_final, the
//! reaper, time passing) by two principals over a few session slots,
//! forged handles included. After every call the limits must hold; at the
//! end, with every handle returned and the sessions cancelled and reaped,
//! nothing may be left: no session, staging byte, QP, ready or stage slot,
//! and only the server's PD alive on the fabric.

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use rctb_core::rcsession::{
    Handle, Limits, Op, PrepareRequest, PrincipalId, PutView, ReadyRequest, ReadyStart, ServerConfig, SessionId,
    SessionManager, StagingLease,
};
use rctb_core::time::Duration;

use crate::{NodeConfig, Sim, SimTransport};

struct Bytes<'a>(std::slice::Iter<'a, u8>);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        self.0.next().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) << 8 | u16::from(self.u8())
    }
}

fn check_limits(m: &SessionManager<SimTransport, ChaCha8Rng>, l: &Limits) -> Result<(), String> {
    let u = m.usage();
    let over = |what: &str, have: u64, max: u64| {
        if have > max { Err(format!("{what}: {have} > limit {max} ({u:?})")) } else { Ok(()) }
    };
    over("sessions", u.sessions.into(), l.max_sessions.into())?;
    over("staging bytes", u.staging_bytes, l.max_staging_bytes)?;
    over("qps", u.qps.into(), l.max_qps.into())?;
    for (who, &(sessions, bytes)) in &u.per_user {
        over(&format!("{who:?} sessions"), sessions.into(), l.max_user_sessions.into())?;
        over(&format!("{who:?} staging bytes"), bytes, l.max_user_staging_bytes)?;
    }
    Ok(())
}

/// What a call sequence got done (so tests can tell a seed reaches deep).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reached {
    pub prepared: u32,
    pub staged: u32,
    pub ready_ok: u32,
    pub put_views: u32,
    pub cancelled: u32,
}

/// A session id the manager did not hand out, chosen by `k` (the same `k`
/// names the same id).
fn unknown_session(k: u8) -> SessionId {
    SessionId::parse(&format!("{k:032x}")).expect("32 lowercase hex digits are a session id")
}

/// Runs one byte-driven call sequence; `Err` says which invariant broke.
pub fn session_calls(bytes: &[u8]) -> Result<(), String> {
    session_calls_reached(bytes).map(|_| ())
}

/// [`session_calls`], also saying how far the sequence got.
pub fn session_calls_reached(bytes: &[u8]) -> Result<Reached, String> {
    let mut reached = Reached::default();
    let mut b = Bytes(bytes.iter());
    let mut limits = Limits::generous();
    limits.max_sessions = u32::from(b.u8() % 6);
    limits.max_staging_bytes = u64::from(b.u8() % 8) * 4096;
    limits.max_qps = u32::from(b.u8() % 6);
    limits.max_user_sessions = u32::from(b.u8() % 5);
    limits.max_user_staging_bytes = u64::from(b.u8() % 8) * 4096;
    limits.max_user_qps = u32::from(b.u8() % 4);
    let mut cfg = ServerConfig::default();
    cfg.limits = limits;
    cfg.t_prep = Duration::from_millis(u64::from(b.u8() % 4) * 50);
    cfg.t_exec = Duration::from_millis(u64::from(b.u8() % 4) * 50);
    cfg.max_ready_slots = u32::from(b.u8() % 3);
    cfg.max_stage_slots = u32::from(b.u8() % 3);
    cfg.rnr_retry = 0;
    let sim = Sim::new(u64::from(b.u16()));
    let node =
        sim.add_node(NodeConfig::new("server", "10.0.0.1".parse().expect("address"))).map_err(|e| e.to_string())?;
    let Ok(mut m) = SessionManager::new(sim.transport(node), ChaCha8Rng::seed_from_u64(7), cfg) else {
        return Ok(reached); // a configuration the manager refuses: nothing to run
    };
    let who = [PrincipalId::from_credentials("alice", "a"), PrincipalId::from_credentials("mallory", "m")];
    let mut ids: Vec<(SessionId, u32)> = Vec::new();
    let mut leases: Vec<StagingLease> = Vec::new();
    let mut views: Vec<PutView> = Vec::new();
    let pick_with_cookie = |v: &[(SessionId, u32)], k: u8| {
        v.get(usize::from(k) % v.len().max(1)).copied().unwrap_or_else(|| (unknown_session(k), 1))
    };
    let pick = |v: &[(SessionId, u32)], k: u8| pick_with_cookie(v, k).0;
    for _ in 0..96 {
        let Some(&call) = b.0.next() else { break };
        let (k, p) = (b.u8(), usize::from(call >> 7));
        match call % 12 {
            0 | 1 => {
                let req = PrepareRequest {
                    principal: who[p],
                    op: if k & 1 == 0 { Op::Get } else { Op::Put },
                    target: "/bucket/key".into(),
                    offset: 0,
                    size: 1 + u64::from(b.u16()) % 9000,
                    client_psn: 0x1234,
                    cookie: u32::from(k) + 1,
                    client_token: None,
                };
                if let Ok(reply) = m.prepare(&req) {
                    ids.push((reply.session, req.cookie));
                    reached.prepared += 1;
                }
            }
            2 => drop(m.finish_prepare(&pick(&ids, k), b.u8() & 1 == 0)),
            3 => {
                if let Ok(lease) = m.borrow_staging(&pick(&ids, k)) {
                    let data = vec![k; usize::try_from(lease.capacity.min(9000)).unwrap_or(0)];
                    let _ = m.write_staging(&lease, 0, &data);
                    leases.push(lease);
                }
            }
            4 => {
                if !leases.is_empty() {
                    let lease = leases.remove(usize::from(k) % leases.len());
                    let written = if b.u8() & 1 == 0 { lease.capacity } else { lease.capacity / 2 };
                    if m.finish_staging(lease, b.u8() % 4 != 0, written, "etag", "v1").is_ok() {
                        reached.staged += 1;
                    }
                }
            }
            5 | 6 => {
                let (id, right) = pick_with_cookie(&ids, k);
                let cookie = if b.u8() % 4 == 0 { right ^ 0x8000_0000 } else { right };
                let qpn = if call % 12 == 5 { 0 } else { 0x100 + u32::from(b.u8()) };
                let req = ReadyRequest {
                    principal: who[p],
                    session: id,
                    cookie,
                    client_qpn: qpn,
                    client_mr_addr: 0x1000,
                    client_mr_rkey: 0x42,
                };
                match m.ready(&req) {
                    Ok(ReadyStart::Done) => reached.ready_ok += 1,
                    Ok(ReadyStart::Pending(ticket)) => {
                        // Let the data phase towards a QP nobody owns run a while.
                        sim.run_until(sim.now() + Duration::from_millis(u64::from(b.u8())));
                        m.progress();
                        let _ = m.take_ready(ticket);
                    }
                    Err(_) => {}
                }
            }
            7 => {
                if m.cancel(&pick(&ids, k), &who[p]).is_ok() {
                    reached.cancelled += 1;
                }
            }
            8 => {
                if let Ok(view) = m.get_put_data(&pick(&ids, k)) {
                    let mut buf = vec![0u8; usize::try_from(view.len.min(64)).unwrap_or(0)];
                    let _ = m.read_put_data(&view, 0, &mut buf);
                    views.push(view);
                    reached.put_views += 1;
                }
            }
            9 => {
                if !views.is_empty() {
                    let view = views.remove(usize::from(k) % views.len());
                    let _ = m.finish_put(view, b.u8() & 1 == 0, "etag", "v1");
                }
            }
            10 => {
                // Forged and replayed handles are refused, never honoured.
                let forged =
                    StagingLease { handle: Handle { epoch: u64::from(k), nonce: u64::from(b.u8()) }, capacity: 1 };
                if leases.iter().all(|l| l.handle != forged.handle) && m.finish_staging(forged, true, 1, "", "").is_ok()
                {
                    return Err(format!("a forged lease {forged:?} was accepted"));
                }
                drop(m.finish_final(&pick(&ids, k)));
            }
            _ => {
                sim.run_until(sim.now() + Duration::from_millis(u64::from(k) * 2));
                m.progress();
                m.reap();
            }
        }
        check_limits(&m, &limits)?;
    }
    // Drain as a well-behaved gateway would: return every handle, release
    // the completion reference a READY took (finish_final, once the data
    // phase is over), cancel everything, let deadlines and data phases run
    // out, reap.
    for lease in leases {
        let _ = m.finish_staging(lease, false, 0, "", "");
    }
    for view in views {
        let _ = m.finish_put(view, false, "", "");
    }
    m.cancel_all();
    for _ in 0..50 {
        m.progress();
        for (id, _) in &ids {
            let _ = m.finish_final(id);
        }
        m.reap();
        if m.usage().sessions == 0 {
            break;
        }
        sim.run_until(sim.now() + Duration::from_millis(100));
    }
    if std::env::var_os("RCTB_FUZZ_DEBUG").is_some() {
        eprintln!("now {:?} sessions {:?} live {:?}", sim.now(), m.sessions(), sim.live_resources());
    }
    let u = m.usage();
    if (u.sessions, u.staging_bytes, u.qps) != (0, 0, 0) || !u.per_user.is_empty() || u.leaked_mrs + u.leaked_qps != 0 {
        return Err(format!("after cancel_all and reaping: {u:?}"));
    }
    let live = sim.live_resources();
    if (live.qps, live.cqs, live.mrs) != (0, 0, 0) {
        return Err(format!("fabric resources left behind: {live:?}"));
    }
    Ok(reached)
}

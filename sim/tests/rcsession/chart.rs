//! A proptest state-machine test of the session state chart: a reference
//! model of §3 (states, reap flag, handles, references, limits, deadlines)
//! against the real manager on the simulator, driven by random call
//! sequences that include repeated, out-of-order, foreign-principal and
//! forged-handle calls. Every call's status must match the model's, and
//! after every step the live sessions and the accounting must agree.
//!
//! READY runs in control-plane-only mode here (client QPN 0), so the chart
//! is explored without the data phase; `basic.rs` covers the data phase.

use proptest::prelude::*;
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use rctb_core::rcsession::*;
use rctb_core::time::{Duration, Instant};

use super::rig::{Rig, rig};

const PRINCIPALS: usize = 2;
const DEADLINE_US: u64 = 100;
const LIMITS: Limits = {
    let mut limits = Limits::generous();
    limits.max_sessions = 4;
    limits.max_staging_bytes = 64;
    limits.max_qps = 4;
    limits.max_user_sessions = 3;
    limits.max_user_staging_bytes = 48;
    limits.max_user_qps = 0;
    limits
};

fn principal(i: usize) -> PrincipalId {
    PrincipalId::from_credentials(&format!("user{i}"), "secret")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bad {
    Nothing,
    SizeZero,
    LongTarget,
    Token,
}

/// A handle the call passes: one issued earlier (by issue order), or a forgery.
#[derive(Clone, Copy, Debug)]
enum HandleRef {
    Issued(usize),
    Forged,
}

#[derive(Clone, Debug)]
enum Call {
    Prepare { op: Op, who: usize, size: u64, bad: Bad },
    Borrow { s: usize },
    FinishStaging { lease: HandleRef, ok: bool, short: bool, long_etag: bool },
    FinishPrepare { s: usize, commit: bool },
    Ready { s: usize, who: usize, cookie_ok: bool },
    GetPutData { s: usize },
    FinishPut { view: HandleRef, committed: bool },
    FinishFinal { s: usize },
    Cancel { s: usize, who: usize },
    Advance { us: u64 },
    Reap,
}

#[derive(Clone, Debug)]
struct MSession {
    op: Op,
    owner: usize,
    size: u64,
    state: SessionState,
    published: bool,
    staged: bool,
    reap: bool,
    lease: Option<usize>,
    view: Option<usize>,
    active: u32,
    put: u32,
    prep_deadline: Option<u64>,
    exec_deadline: Option<u64>,
    alive: bool,
}

#[derive(Clone, Debug, Default)]
struct Model {
    sessions: Vec<MSession>,
    /// Issued leases and views: (session, consumed).
    leases: Vec<(usize, bool)>,
    views: Vec<(usize, bool)>,
    now_us: u64,
    /// The status the last call must return.
    expect: Option<Status>,
}

fn cookie(s: usize) -> u32 {
    0x100 + s as u32
}

impl Model {
    fn live(&self, s: usize) -> Option<&MSession> {
        self.sessions.get(s).filter(|m| m.alive)
    }

    fn usage(&self) -> (u32, u64, Vec<(u32, u64)>) {
        let mut per = vec![(0u32, 0u64); PRINCIPALS];
        let (mut n, mut bytes) = (0, 0);
        for s in self.sessions.iter().filter(|s| s.alive) {
            n += 1;
            bytes += s.size;
            per[s.owner].0 += 1;
            per[s.owner].1 += s.size;
        }
        (n, bytes, per)
    }

    fn reap(&mut self) {
        let now = self.now_us;
        for s in self.sessions.iter_mut().filter(|s| s.alive) {
            let expired = |d: Option<u64>| d.is_some_and(|d| now > d);
            if expired(s.prep_deadline) || expired(s.exec_deadline) {
                s.reap = true;
            }
            if s.reap && s.lease.is_none() && s.view.is_none() && s.active == 0 && s.put == 0 {
                s.alive = false;
            }
        }
    }

    fn call(&mut self, c: &Call) -> Result<(), Status> {
        use Status::{Arg, Double, Limit, NoSession, Session, Short, Stale, State, Trunc};
        match *c {
            Call::Prepare { op, who, size, bad } => {
                if bad == Bad::SizeZero {
                    return Err(Arg);
                }
                let (n, bytes, per) = self.usage();
                let l = LIMITS;
                if n + 1 > l.max_sessions
                    || bytes + size > l.max_staging_bytes
                    || n + 1 > l.max_qps
                    || per[who].0 + 1 > l.max_user_sessions
                    || per[who].1 + size > l.max_user_staging_bytes
                {
                    return Err(Limit);
                }
                match bad {
                    Bad::LongTarget => return Err(Trunc),
                    Bad::Token => return Err(Arg),
                    _ => {}
                }
                self.sessions.push(MSession {
                    op,
                    owner: who,
                    size,
                    state: SessionState::Prepared,
                    published: false,
                    staged: false,
                    reap: false,
                    lease: None,
                    view: None,
                    active: 0,
                    put: 0,
                    prep_deadline: Some(self.now_us + DEADLINE_US),
                    exec_deadline: None,
                    alive: true,
                });
                Ok(())
            }
            Call::Borrow { s } => {
                let m = self.live(s).ok_or(NoSession)?;
                if m.state != SessionState::Prepared {
                    return Err(Stale);
                }
                if m.lease.is_some() {
                    return Err(Double);
                }
                self.leases.push((s, false));
                self.sessions[s].lease = Some(self.leases.len() - 1);
                Ok(())
            }
            Call::FinishStaging { lease, ok, short, long_etag } => {
                let HandleRef::Issued(i) = lease else { return Err(Stale) };
                let Some(&(s, false)) = self.leases.get(i) else { return Err(Stale) };
                self.leases[i].1 = true;
                let m = &mut self.sessions[s];
                m.lease = None;
                let r = if !ok {
                    m.reap = true;
                    Ok(())
                } else if short {
                    m.reap = true;
                    Err(Short)
                } else if long_etag {
                    m.reap = true;
                    Err(Trunc)
                } else {
                    m.staged = true;
                    Ok(())
                };
                self.reap();
                r
            }
            Call::FinishPrepare { s, commit } => {
                let m = self.live(s).ok_or(NoSession)?;
                if m.state != SessionState::Prepared {
                    return Err(Stale);
                }
                if commit && m.op == Op::Get && !m.staged {
                    return Err(State);
                }
                let m = &mut self.sessions[s];
                if commit {
                    m.published = true;
                } else {
                    m.reap = true;
                }
                self.reap();
                Ok(())
            }
            Call::Ready { s, who, cookie_ok } => {
                let now = self.now_us;
                let m = self.live(s).ok_or(NoSession)?;
                if m.owner != who {
                    return Err(Session);
                }
                if m.state != SessionState::Prepared || !m.published {
                    return Err(State);
                }
                if m.reap {
                    return Err(Stale);
                }
                if !cookie_ok {
                    return Err(Session);
                }
                let m = &mut self.sessions[s];
                m.state = SessionState::Completing;
                m.active = 1;
                m.prep_deadline = None;
                m.exec_deadline = Some(now + DEADLINE_US);
                Ok(())
            }
            Call::GetPutData { s } => {
                let m = self.live(s).ok_or(NoSession)?;
                if m.state != SessionState::Completing || m.op != Op::Put {
                    return Err(State);
                }
                if m.view.is_some() {
                    return Err(Double);
                }
                self.views.push((s, false));
                let m = &mut self.sessions[s];
                m.view = Some(self.views.len() - 1);
                m.active = m.active.saturating_sub(1);
                m.put += 1;
                Ok(())
            }
            Call::FinishPut { view, .. } => {
                let HandleRef::Issued(i) = view else { return Err(Stale) };
                let Some(&(s, false)) = self.views.get(i) else { return Err(Stale) };
                self.views[i].1 = true;
                let m = &mut self.sessions[s];
                m.view = None;
                m.put -= 1;
                m.reap = true;
                self.reap();
                Ok(())
            }
            Call::FinishFinal { s } => {
                self.live(s).ok_or(NoSession)?;
                let m = &mut self.sessions[s];
                m.active = m.active.saturating_sub(1);
                m.reap = true;
                self.reap();
                Ok(())
            }
            Call::Cancel { s, who } => {
                let Some(m) = self.live(s) else { return Ok(()) };
                if m.owner != who {
                    return Err(Session);
                }
                self.sessions[s].reap = true;
                self.reap();
                Ok(())
            }
            Call::Advance { us } => {
                self.now_us += us;
                Ok(())
            }
            Call::Reap => {
                self.reap();
                Ok(())
            }
        }
    }
}

struct ChartModel;

impl ReferenceStateMachine for ChartModel {
    type State = Model;
    type Transition = Call;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::default()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Call> {
        // Session indexes include one past the end (a session never made);
        // most calls go to the newest sessions, where the live ones are.
        let n = state.sessions.len();
        let s = prop_oneof![4 => n.saturating_sub(2)..=n, 1 => 0..=n];
        let who = 0..PRINCIPALS;
        let handle =
            |n: usize| prop_oneof![4 => (0..n.max(1)).prop_map(HandleRef::Issued), 1 => Just(HandleRef::Forged)];
        let op = prop_oneof![Just(Op::Get), Just(Op::Put)];
        let bad = prop_oneof![12 => Just(Bad::Nothing), 1 => Just(Bad::SizeZero), 1 => Just(Bad::LongTarget), 1 => Just(Bad::Token)];
        prop_oneof![
            4 => (op, who.clone(), 1u64..=24, bad).prop_map(|(op, who, size, bad)| Call::Prepare { op, who, size, bad }),
            3 => s.clone().prop_map(|s| Call::Borrow { s }),
            3 => (handle(state.leases.len()), any::<bool>(), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
                .prop_map(|(lease, ok, short, long_etag)| Call::FinishStaging { lease, ok: ok || short, short, long_etag }),
            3 => (s.clone(), prop::bool::weighted(0.85)).prop_map(|(s, commit)| Call::FinishPrepare { s, commit }),
            4 => (s.clone(), who.clone(), prop::bool::weighted(0.9)).prop_map(|(s, who, cookie_ok)| Call::Ready { s, who, cookie_ok }),
            2 => s.clone().prop_map(|s| Call::GetPutData { s }),
            2 => (handle(state.views.len()), any::<bool>()).prop_map(|(view, committed)| Call::FinishPut { view, committed }),
            2 => s.clone().prop_map(|s| Call::FinishFinal { s }),
            2 => (s, who).prop_map(|(s, who)| Call::Cancel { s, who }),
            1 => (1u64..150).prop_map(|us| Call::Advance { us }),
            1 => Just(Call::Reap),
        ]
        .boxed()
    }

    fn apply(mut state: Model, c: &Call) -> Model {
        state.expect = Some(match state.call(c) {
            Ok(()) => Status::Ok,
            Err(s) => s,
        });
        state
    }
}

struct Sut {
    rig: Rig,
    ids: Vec<SessionId>,
    leases: Vec<StagingLease>,
    views: Vec<PutView>,
}

impl Sut {
    fn forged(&self) -> Handle {
        // Epoch 0 is never issued; a real epoch with an unissued nonce neither.
        match self.leases.last() {
            Some(l) => Handle { epoch: l.handle.epoch, nonce: l.handle.nonce + 1000 },
            None => Handle { epoch: 0, nonce: 1 },
        }
    }

    fn call(&mut self, c: &Call) -> Result<(), RcError> {
        let unknown = SessionId::parse("ffffffffffffffffffffffffffffffff").unwrap();
        let id = |s: usize| self.ids.get(s).copied().unwrap_or(unknown);
        let m = &mut self.rig.m;
        match *c {
            Call::Prepare { op, who, size, bad } => {
                let req = PrepareRequest {
                    principal: principal(who),
                    op,
                    target: if bad == Bad::LongTarget { format!("/b/{}", "k".repeat(2046)) } else { "/b/k".into() },
                    offset: 0,
                    size: if bad == Bad::SizeZero { 0 } else { size },
                    client_psn: 1,
                    cookie: cookie(self.ids.len()),
                    client_token: (bad == Bad::Token).then(|| "zz".into()),
                };
                self.ids.push(m.prepare(&req)?.session);
                Ok(())
            }
            Call::Borrow { s } => {
                self.leases.push(m.borrow_staging(&id(s))?);
                Ok(())
            }
            Call::FinishStaging { lease, ok, short, long_etag } => {
                let l = match lease {
                    HandleRef::Issued(i) if i < self.leases.len() => self.leases[i],
                    _ => StagingLease { handle: self.forged(), capacity: 1 },
                };
                let written = if short { l.capacity - 1 } else { l.capacity };
                let etag = if long_etag { "e".repeat(128) } else { "etag".into() };
                self.rig.m.finish_staging(l, ok, written, &etag, "v1")
            }
            Call::FinishPrepare { s, commit } => m.finish_prepare(&id(s), commit),
            Call::Ready { s, who, cookie_ok } => {
                let req = ReadyRequest {
                    principal: principal(who),
                    session: id(s),
                    cookie: cookie(s) ^ u32::from(!cookie_ok),
                    client_qpn: 0,
                    client_mr_addr: 0,
                    client_mr_rkey: 0,
                };
                let start = self.rig.m.ready(&req)?;
                assert_eq!(start, ReadyStart::Done);
                let reply = self.rig.m.done_reply(&req.session).unwrap();
                assert_eq!((reply.outcome, reply.cookie_echo), (ReadyOutcome::Ok, req.cookie));
                Ok(())
            }
            Call::GetPutData { s } => {
                self.views.push(m.get_put_data(&id(s))?);
                Ok(())
            }
            Call::FinishPut { view, committed } => {
                let v = match view {
                    HandleRef::Issued(i) if i < self.views.len() => self.views[i],
                    _ => PutView { handle: self.forged(), len: 1 },
                };
                self.rig.m.finish_put(v, committed, "etag", "")
            }
            Call::FinishFinal { s } => m.finish_final(&id(s)),
            Call::Cancel { s, who } => m.cancel(&id(s), &principal(who)).map(|_| ()),
            Call::Advance { us } => {
                let t = self.rig.sim.now() + Duration::from_micros(us);
                self.rig.sim.run_until(t);
                Ok(())
            }
            Call::Reap => {
                m.reap();
                Ok(())
            }
        }
    }
}

struct ChartTest;

impl StateMachineTest for ChartTest {
    type SystemUnderTest = Sut;
    type Reference = ChartModel;

    fn init_test(_: &Model) -> Sut {
        let mut cfg = ServerConfig::default();
        cfg.limits = LIMITS;
        cfg.t_prep = Duration::from_micros(DEADLINE_US);
        cfg.t_exec = Duration::from_micros(DEADLINE_US);
        Sut { rig: rig(7, cfg, 0), ids: Vec::new(), leases: Vec::new(), views: Vec::new() }
    }

    fn apply(mut sut: Sut, model: &Model, c: Call) -> Sut {
        let got = match sut.call(&c) {
            Ok(()) => Status::Ok,
            Err(e) => e.status(),
        };
        assert_eq!(Some(got), model.expect, "{c:?}");
        sut
    }

    fn check_invariants(sut: &Sut, model: &Model) {
        assert_eq!(sut.rig.sim.now(), Instant::from_nanos(model.now_us * 1000));
        let live = sut.rig.m.sessions();
        let expected: Vec<_> = model.sessions.iter().enumerate().filter(|(_, s)| s.alive).collect();
        assert_eq!(live.len(), expected.len(), "live sessions: {live:?}");
        for (i, m) in expected {
            let s = live.iter().find(|s| s.session == sut.ids[i]).expect("model's live session exists");
            assert_eq!(
                (s.state, s.published, s.staged, s.reap_pending, s.op, s.principal),
                (m.state, m.published, m.staged, m.reap, m.op, principal(m.owner)),
                "session {i}"
            );
            let handles = u32::from(m.lease.is_some()) + u32::from(m.view.is_some()) + m.active + m.put;
            assert_eq!(s.handles, handles, "session {i}");
        }
        let (n, bytes, per) = model.usage();
        let u = sut.rig.m.usage();
        assert_eq!((u.sessions, u.staging_bytes, u.qps), (n, bytes, n));
        for (who, &(sessions, staged)) in per.iter().enumerate() {
            let got = u.per_user.get(&principal(who)).copied().unwrap_or((0, 0));
            assert_eq!(got, (sessions, staged), "user {who}");
        }
        assert!(u.sessions <= LIMITS.max_sessions && u.staging_bytes <= LIMITS.max_staging_bytes);
        assert_eq!((u.leaked_mrs, u.leaked_qps), (0, 0));
        // Every live session owns exactly one QP, CQ, region and PD on the server.
        let r = sut.rig.sim.live_resources();
        assert_eq!((r.qps, r.cqs, r.mrs, r.pds), (n as usize, n as usize, n as usize, n as usize));
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn session_state_chart(sequential 1..60 => ChartTest);
}

//! Shared set-up for the unit tests on the fake transport: a server, two
//! principals, and the usual PREPARE, READY and completion steps.

use super::CountingRng;
use super::fake::{Fake, wc};
use crate::transport::{CqId, QpId, WcOpcode, WcStatus};
use crate::*;

pub type Server = SessionManager<Fake, CountingRng>;

pub fn server(cfg: ServerConfig) -> Server {
    SessionManager::new(Fake::default(), CountingRng(0), cfg).unwrap()
}

pub fn alice() -> PrincipalId {
    PrincipalId::from_credentials("alice", "secret-a")
}

pub fn bob() -> PrincipalId {
    PrincipalId::from_credentials("bob", "secret-b")
}

pub const COOKIE: u32 = 0xC0DE_0001;

pub fn prep(who: PrincipalId, op: Op, size: u64) -> PrepareRequest {
    PrepareRequest {
        principal: who,
        op,
        target: "/bucket/key".into(),
        offset: 0,
        size,
        client_psn: 0x123,
        cookie: COOKIE,
        client_token: None,
    }
}

/// A GET of `data`, staged and committed.
pub fn staged_get(m: &mut Server, who: PrincipalId, data: &[u8]) -> SessionId {
    inproc::prepare_get(m, &prep(who, Op::Get, data.len() as u64), data, "etag-1").unwrap().session
}

/// A PUT of `size` bytes, committed.
pub fn published_put(m: &mut Server, who: PrincipalId, size: u64) -> SessionId {
    inproc::prepare_put(m, &prep(who, Op::Put, size)).unwrap().session
}

pub fn ready_req(who: PrincipalId, id: SessionId, client_qpn: u32) -> ReadyRequest {
    ReadyRequest {
        principal: who,
        session: id,
        cookie: COOKIE,
        client_qpn,
        client_mr_addr: 0x7000,
        client_mr_rkey: 0x77,
    }
}

/// READY with a client QP: the data phase's ticket.
pub fn start(m: &mut Server, who: PrincipalId, id: SessionId) -> ReadyTicket {
    match m.ready(&ready_req(who, id, 0x42)).unwrap() {
        ReadyStart::Pending(t) => t,
        ReadyStart::Done => panic!("a client QPN starts a data phase"),
    }
}

pub fn cq_of(m: &Server, id: SessionId) -> CqId {
    m.sessions[&id].cq
}

pub fn qp_of(m: &Server, id: SessionId) -> QpId {
    m.sessions[&id].qp.id
}

/// The GET's WRITE_WITH_IMM completes with `status`.
pub fn send_done(m: &mut Server, id: SessionId, status: WcStatus) {
    let cq = cq_of(m, id);
    m.t.complete(cq, wc(1, status, WcOpcode::RdmaWrite, 0, None));
}

/// The client's WRITE_WITH_IMM lands in the PUT's staging region.
pub fn put_lands(m: &mut Server, id: SessionId, data: &[u8]) {
    let mr = m.sessions[&id].staging.id;
    crate::transport::Transport::mr_write(&mut m.t, mr, 0, data).unwrap();
    let cq = cq_of(m, id);
    m.t.complete(cq, wc(1, WcStatus::Success, WcOpcode::RecvRdmaWithImm, data.len() as u32, Some(COOKIE)));
}

/// `progress` until the ticket's result is out.
pub fn finish(m: &mut Server, t: ReadyTicket) -> Result<ReadyReply, RcError> {
    m.progress();
    m.take_ready(t).expect("the data phase ended")
}

pub fn ns(n: u64) -> crate::time::Duration {
    crate::time::Duration::from_nanos(n)
}

//! The client on the fake transport: its verbs objects, token, the
//! PREPARE request, connecting towards the server, the GET receive and
//! PUT write, what `poll` takes as done, and BUSY's backoff (written for
//! the mutants of client.rs, issue 39).

use super::fake::{Call, Fake, wc};
use super::rig::{COOKIE, alice};
use crate::hipobj::RdmaToken;
use crate::time::Duration;
use crate::transport::{
    Access, AddressVector, Gid, InitAttr, Mtu, Psn, QpCaps, QpTransition, RemoteAddr, RnrTimer, RtrAttr, RtsAttr,
    SendOp, Sge, WcOpcode, WcStatus,
};
use crate::*;

const LW_RW: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

fn client(cfg: ClientConfig) -> RcClient<Fake> {
    RcClient::new(Fake::default(), cfg).unwrap()
}

fn reply(token: Option<RdmaToken>) -> PrepareReply {
    PrepareReply {
        session: SessionId(0xABC),
        server_qpn: 0x2222,
        server_psn: 0x2222,
        staging_addr: 0x8000,
        staging_rkey: 0x88,
        reply_token: token,
    }
}

fn calls_from(c: &RcClient<Fake>, n: usize) -> Vec<Call> {
    c.transport().calls[n..].to_vec()
}

#[test]
fn a_client_makes_its_pd_cq_qp_and_region_and_close_destroys_them_in_order() {
    let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let t = Fake { shared: Some(log.clone()), ..Fake::default() };
    let c = RcClient::new(t, ClientConfig { capacity: 4096, ..ClientConfig::default() }).unwrap();
    let calls = log.lock().unwrap().clone();
    let Call::AllocPd(pd) = calls[0] else { panic!("{calls:?}") };
    assert_eq!(calls[1], Call::CreateCq(16));
    let Call::CreateQp(init) = calls[2] else { panic!("{calls:?}") };
    assert_eq!((init.pd, init.send_cq, init.recv_cq, init.sq_sig_all, init.srq), (pd, c.cq(), c.cq(), true, None));
    assert_eq!(
        init.caps,
        QpCaps { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 }
    );
    assert_eq!(calls[3], Call::RegMr(pd, 4096, LW_RW));
    assert_eq!(calls.len(), 4);
    let mr = c.region();
    assert_eq!((mr.len, mr.access), (4096, LW_RW));
    assert_eq!(c.transport().mrs[&mr.id].0, mr);
    let qp = *c.transport().qp_cq.keys().next().unwrap();
    assert_eq!(c.qpn(), 0x1000 + qp.0);
    let cq = c.cq();
    c.close().unwrap();
    let calls = log.lock().unwrap().clone();
    assert_eq!(calls[4..], [Call::DestroyQp(qp), Call::DestroyCq(cq), Call::DeregMr(mr.id), Call::DeallocPd(pd)]);
}

#[test]
fn the_token_names_our_qp_gid_port_and_region() {
    let c = client(ClientConfig { port: 2, ..ClientConfig::default() });
    let mr = c.region();
    let own = c.transport().port_gids[1].gid;
    let t = c.token(300);
    assert_eq!(t, RdmaToken { rkey: mr.rkey, remote_addr: mr.addr, length: 300, ..RdmaToken::rc(c.qpn(), own, 2) });
    assert_ne!((t.rkey, t.remote_addr), (0, 0));
}

#[test]
fn begin_takes_sizes_up_to_the_capacity_and_makes_a_fresh_qp_each_time() {
    let mut c = client(ClientConfig { capacity: 100, ..ClientConfig::default() });
    assert_eq!(
        c.begin(alice(), Op::Get, "/b/k", 101, 5, COOKIE).unwrap_err(),
        ClientError::TooLarge { size: 101, capacity: 100 }
    );
    let first = c.qpn();
    let (x, req) = c.begin(alice(), Op::Put, "/b/k", 100, 5, COOKIE).unwrap();
    assert_ne!(c.qpn(), first, "a new QP for a new session");
    assert!(c.transport().calls.iter().any(|call| matches!(call, Call::DestroyQp(q) if q.0 + 0x1000 == first)));
    assert_eq!(
        req,
        PrepareRequest {
            principal: alice(),
            op: Op::Put,
            target: "/b/k".into(),
            offset: 0,
            size: 100,
            client_psn: 5,
            cookie: COOKIE,
            client_token: Some(c.token(100).to_hex()),
        }
    );
    assert_eq!(
        (x.op, x.size, x.psn, x.cookie, x.phase),
        (Op::Put, 100, Psn::wrapping(5), COOKIE, TransferPhase::Preparing)
    );
    assert_eq!((x.session, x.busy_retries), (None, 0));
}

#[test]
fn a_psn_of_zero_modulo_2_to_the_24_becomes_1() {
    let mut c = client(ClientConfig::default());
    for (asked, got) in [(0, 1), (1 << 24, 1), (5, 5), ((1 << 24) + 7, 7)] {
        let (x, req) = c.begin(alice(), Op::Get, "/b/k", 1, asked, COOKIE).unwrap();
        assert_eq!((x.psn.get(), req.client_psn), (got, got), "{asked}");
    }
}

#[test]
fn the_payload_goes_into_and_comes_out_of_our_region() {
    let mut c = client(ClientConfig::default());
    c.write_payload(b"hello").unwrap();
    assert_eq!(&c.transport().mrs[&c.region().id].1[..5], b"hello");
    let mut buf = [0u8; 4];
    c.transport_mut().mrs.values_mut().next().unwrap().1[..4].copy_from_slice(b"abcd");
    c.read_payload(&mut buf).unwrap();
    assert_eq!(&buf, b"abcd");
}

fn connected(c: &mut RcClient<Fake>, op: Op, size: u64, post_recv: bool) -> (ClientTransfer, ReadyRequest, usize) {
    let (mut x, _) = c.begin(alice(), op, "/b/k", size, 0x321, COOKIE).unwrap();
    let n = c.transport().calls.len();
    let r = c.connect(&mut x, &reply(None), post_recv).unwrap();
    (x, r, n)
}

#[test]
fn connect_moves_our_qp_through_reset_init_rtr_rts_towards_the_server() {
    let cfg =
        ClientConfig { port: 2, timeout: 9, retry_cnt: 3, rnr_retry: 5, min_rnr_timer: 14, ..ClientConfig::default() };
    let mut c = client(cfg);
    let (x, r, n) = connected(&mut c, Op::Put, 8, true);
    let qp = *c.transport().qp_cq.keys().last().unwrap();
    let own = c.transport().port_gids[1].gid;
    let rtr = RtrAttr {
        path_mtu: Mtu::Mtu1024,
        dest_qpn: 0x2222,
        rq_psn: Psn::wrapping(0x2222),
        max_dest_rd_atomic: 1,
        min_rnr_timer: RnrTimer::from_code(14).unwrap(),
        av: AddressVector { port: 2, ..AddressVector::new(own, 1) },
    };
    let rts = RtsAttr { sq_psn: Psn::wrapping(0x321), timeout: 9, retry_cnt: 3, rnr_retry: 5, max_rd_atomic: 1 };
    assert_eq!(
        calls_from(&c, n),
        [
            Call::Modify(qp, QpTransition::Reset),
            Call::Modify(qp, QpTransition::Init(InitAttr { pkey_index: 0, port: 2, access: LW_RW })),
            Call::Modify(qp, QpTransition::Rtr(rtr)),
            Call::Modify(qp, QpTransition::Rts(rts)),
        ],
        "a PUT posts no receive"
    );
    let mr = c.region();
    assert_eq!(
        r,
        ReadyRequest {
            principal: alice(),
            session: SessionId(0xABC),
            cookie: COOKIE,
            client_qpn: c.qpn(),
            client_mr_addr: mr.addr,
            client_mr_rkey: mr.rkey
        }
    );
    assert_eq!(c.ready_request(&x), r);
    assert_eq!((x.phase, x.session, x.reply), (TransferPhase::Connected, Some(SessionId(0xABC)), Some(reply(None))));
}

#[test]
fn connect_aims_at_the_gid_of_the_servers_reply_token() {
    let mut c = client(ClientConfig::default());
    let (mut x, _) = c.begin(alice(), Op::Put, "/b/k", 8, 1, COOKIE).unwrap();
    let server = Gid::from_ipv4("10.0.0.9".parse().unwrap());
    c.connect(&mut x, &reply(Some(RdmaToken::rc(0x2222, server, 1))), true).unwrap();
    let rtr = c.transport().calls.iter().rev().find_map(|call| match call {
        Call::Modify(_, QpTransition::Rtr(a)) => Some(*a),
        _ => None,
    });
    assert_eq!(rtr.unwrap().av.dest_gid, server);
}

#[test]
fn connect_discards_completions_left_from_before() {
    let mut c = client(ClientConfig::default());
    let cq = c.cq();
    for _ in 0..20 {
        c.transport_mut().complete(cq, wc(7, WcStatus::RetryExcErr, WcOpcode::RdmaWrite, 0, None));
    }
    let (mut x, _, _) = connected(&mut c, Op::Get, 4, true);
    assert!(c.transport().cqs[&cq].is_empty());
    assert_eq!(c.poll(&mut x), Ok(None));
}

#[test]
fn a_get_posts_one_receive_for_its_size_and_only_once_per_connection() {
    let mut c = client(ClientConfig::default());
    let (mut x, _, n) = connected(&mut c, Op::Get, 40, true);
    let qp = *c.transport().qp_cq.keys().last().unwrap();
    assert_eq!(calls_from(&c, n).last(), Some(&Call::PostRecv(qp, 7, vec![Sge::new(c.region().id, 0, 40)])));
    assert!(c.recv_posted(&x));
    assert_eq!(c.post_get_recv(&mut x), Err(ClientError::Phase("post_get_recv")));
    c.abandon(&mut x).unwrap();
    assert_eq!(c.transport().calls.last(), Some(&Call::Modify(qp, QpTransition::Reset)));
    assert!(!c.recv_posted(&x));
    let (mut x, _, _) = connected(&mut c, Op::Get, 40, false);
    assert!(!c.recv_posted(&x));
    c.post_get_recv(&mut x).unwrap();
    assert!(c.recv_posted(&x));
    let (mut x, _, _) = connected(&mut c, Op::Put, 40, true);
    assert!(!c.recv_posted(&x));
    assert_eq!(c.post_get_recv(&mut x), Err(ClientError::Phase("post_get_recv")));
}

#[test]
fn a_put_writes_our_region_into_the_staging_region_with_the_cookie() {
    let mut c = client(ClientConfig::default());
    let (mut x, _) = c.begin(alice(), Op::Put, "/b/k", 12, 1, COOKIE).unwrap();
    assert_eq!(c.start_put(&mut x), Err(ClientError::Phase("start_put")), "no reply yet");
    c.connect(&mut x, &reply(None), false).unwrap();
    c.start_put(&mut x).unwrap();
    let qp = *c.transport().qp_cq.keys().last().unwrap();
    let remote = RemoteAddr { addr: 0x8000, rkey: 0x88 };
    assert_eq!(
        c.transport().calls.last(),
        Some(&Call::PostSend(
            qp,
            7,
            SendOp::WriteWithImm { remote, imm: COOKIE },
            vec![Sge::new(c.region().id, 0, 12)],
            true
        ))
    );
    assert_eq!(x.phase, TransferPhase::Moving);
    let (mut g, _, _) = connected(&mut c, Op::Get, 4, true);
    assert_eq!(c.start_put(&mut g), Err(ClientError::Phase("start_put")));
    c.ready_sent(&mut g);
    assert_eq!(g.phase, TransferPhase::Moving);
}

#[test]
fn a_get_is_done_when_its_receive_lands_with_the_cookie_and_the_size() {
    type Case = (WcStatus, WcOpcode, u32, Option<u32>, Result<Option<()>, ClientError>);
    let cases: [Case; 6] = [
        (WcStatus::Success, WcOpcode::RecvRdmaWithImm, 4, Some(COOKIE), Ok(Some(()))),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            4,
            Some(1),
            Err(ClientError::Immediate { got: Some(1), expected: COOKIE }),
        ),
        (
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            3,
            Some(COOKIE),
            Err(ClientError::Length { got: 3, expected: 4 }),
        ),
        (
            WcStatus::RemAccessErr,
            WcOpcode::RecvRdmaWithImm,
            4,
            Some(COOKIE),
            Err(ClientError::Completion(WcStatus::RemAccessErr)),
        ),
        (WcStatus::WrFlushErr, WcOpcode::RecvRdmaWithImm, 4, Some(COOKIE), Ok(None)),
        (WcStatus::Success, WcOpcode::RdmaWrite, 4, None, Ok(None)),
    ];
    for (status, opcode, len, imm, expect) in cases {
        let mut c = client(ClientConfig::default());
        let (mut x, _, _) = connected(&mut c, Op::Get, 4, true);
        let cq = c.cq();
        c.transport_mut().complete(cq, wc(7, status, opcode, len, imm));
        assert_eq!(c.poll(&mut x), expect, "{status:?} {opcode:?} {len} {imm:?}");
        assert_eq!(x.phase == TransferPhase::Done, expect == Ok(Some(())));
    }
    let mut c = client(ClientConfig::default());
    let (mut x, _, _) = connected(&mut c, Op::Get, 4, true);
    let cq = c.cq();
    c.transport_mut().complete(cq, wc(8, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 4, Some(COOKIE)));
    assert_eq!(c.poll(&mut x), Ok(None), "another WR's completion");
}

#[test]
fn a_put_is_done_when_its_write_completes() {
    let mut c = client(ClientConfig::default());
    let (mut x, _, _) = connected(&mut c, Op::Put, 4, false);
    c.start_put(&mut x).unwrap();
    assert_eq!(c.poll(&mut x), Ok(None));
    let cq = c.cq();
    c.transport_mut().complete(cq, wc(7, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 4, Some(COOKIE)));
    assert_eq!(c.poll(&mut x), Ok(None), "not a PUT's completion");
    c.transport_mut().complete(cq, wc(7, WcStatus::Success, WcOpcode::RdmaWrite, 4, None));
    assert_eq!(c.poll(&mut x), Ok(Some(())));
    assert_eq!(x.phase, TransferPhase::Done);
}

#[test]
fn busy_reconnects_backs_off_doubling_to_64x_and_gives_up_after_the_last_retry() {
    let cfg = ClientConfig { max_busy_retries: 9, backoff: Duration::from_micros(10), ..ClientConfig::default() };
    let mut c = client(cfg);
    let (mut x, _, _) = connected(&mut c, Op::Get, 4, true);
    let qp = *c.transport().qp_cq.keys().last().unwrap();
    for (retry, times) in [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 32), (7, 64), (8, 64), (9, 64)] {
        let n = c.transport().calls.len();
        let r = c.on_busy(&mut x).unwrap();
        assert_eq!(r, c.ready_request(&x));
        assert_eq!(x.busy_retries, retry);
        assert_eq!(x.retry_at, c.transport().now + Duration::from_micros(10 * times), "retry {retry}");
        let calls = calls_from(&c, n);
        assert_eq!(calls[0], Call::Modify(qp, QpTransition::Reset));
        assert_eq!(calls.last(), Some(&Call::PostRecv(qp, 7, vec![Sge::new(c.region().id, 0, 4)])));
        assert!(c.recv_posted(&x));
        assert_eq!(x.phase, TransferPhase::Connected);
    }
    assert_eq!(c.on_busy(&mut x), Err(ClientError::BusyExhausted(9)));
}

#[test]
fn a_put_on_busy_reconnects_without_a_receive() {
    let mut c = client(ClientConfig { max_busy_retries: 1, ..ClientConfig::default() });
    let (mut x, _, _) = connected(&mut c, Op::Put, 4, false);
    let n = c.transport().calls.len();
    c.on_busy(&mut x).unwrap();
    assert!(matches!(calls_from(&c, n).last(), Some(Call::Modify(_, QpTransition::Rts(_)))));
    assert_eq!(c.on_busy(&mut x), Err(ClientError::BusyExhausted(1)));
}

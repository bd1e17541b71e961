//! Shared receive queues and CQ overflow beyond the conformance cases (which
//! run the same behaviour on rxe): multi-packet SENDs of several QPs
//! interleaved on the wire, each filling the SRQ receive its QP took first;
//! the engine's counter of lost completions; refusals naming the field.
//!
//! Deterministic (seed 1, no random faults); replay with
//! `cargo test -p rctb-sim --test srq`.

use rctb_conformance::{Endpoints, Link, completions, expect_wc, pattern, run_case};
use rctb_core::transport::*;
use rctb_sim::{NodeConfig, Sim, SimTransport};

fn sim_pair() -> (Sim, SimTransport, SimTransport) {
    let sim = Sim::new(1);
    let mtu = Mtu::Mtu1024;
    let a = sim
        .add_node({
            let mut node_config = NodeConfig::new("a", "10.0.0.1".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    let b = sim
        .add_node({
            let mut node_config = NodeConfig::new("b", "10.0.0.2".parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap();
    let (ta, tb) = (sim.transport(a), sim.transport(b));
    (sim, ta, tb)
}

fn run(name: &str, case: impl FnOnce(&mut Endpoints<'_, SimTransport>) -> Result<(), String>) {
    let (sim, mut a, mut b) = sim_pair();
    let r = run_case(&mut a, &mut b, name.to_string(), case);
    assert!(r.passed(), "seed 1: {}", r.line());
    assert_eq!(sim.live_resources(), rctb_sim::LiveResources::default(), "seed 1: {name} released everything");
}

/// Three QPs post 3-packet SENDs back to back, so their packets interleave
/// on b; each message lands whole in the receive its QP took when its first
/// packet arrived, not in one shared by whichever QP came next.
#[test]
fn interleaved_multi_packet_sends_keep_their_receives() {
    run("interleaved", |x| {
        const LEN: u32 = 3000; // 3 packets at MTU 1024
        const SLOT: u64 = 4096;
        let ma = x.mr(true, 3 * SLOT, Access::LOCAL_WRITE)?;
        let mb = x.mr(false, 3 * SLOT, Access::LOCAL_WRITE)?;
        let srq = x.srq(false, 15, 0)?;
        for id in 0..3u64 {
            let sge = [Sge::new(mb.id, id * SLOT, SLOT as u32)];
            x.b.post_srq_recv(srq, &RecvWr::new(id, &sge)).map_err(|e| e.to_string())?;
        }
        let mut pairs = Vec::new();
        for _ in 0..3 {
            pairs.push(x.connect_with(Link::default(), |_, b| b.srq = Some(srq))?);
        }
        for (i, p) in pairs.iter().enumerate() {
            let off = i as u64 * SLOT;
            x.a.mr_write(ma.id, off, &pattern(i as u32, LEN as usize)).map_err(|e| e.to_string())?;
            let sge = [Sge::new(ma.id, off, LEN)];
            x.a.post_send(p.a.id, &SendWr::new(i as u64, SendOp::Send, &sge)).map_err(|e| e.to_string())?;
        }
        let rc = completions(x.b, &x.sb, 3)?;
        if rc.len() != 3 {
            return Err(format!("{} receive completions (expected 3)", rc.len()));
        }
        for wc in &rc {
            expect_wc(Some(wc), "receive", WcStatus::Success, Some(WcOpcode::Recv), Some(LEN), Some(None))?;
            let sender = pairs.iter().position(|p| p.b.id == wc.qp).ok_or("a completion on no case QP")?;
            let mut got = vec![0u8; LEN as usize];
            x.b.mr_read(mb.id, wc.wr_id * SLOT, &mut got).map_err(|e| e.to_string())?;
            if got != pattern(sender as u32, LEN as usize) {
                return Err(format!("receive {} holds other data than QP {sender}'s message", wc.wr_id));
            }
        }
        let ids: std::collections::BTreeSet<u64> = rc.iter().map(|w| w.wr_id).collect();
        if ids.len() != 3 {
            return Err(format!("receives taken twice: {rc:?}"));
        }
        Ok(())
    });
}

/// Bad arguments are refused with the field named, and change nothing.
#[test]
fn srq_refusals_name_the_field() {
    let (_sim, mut a, _b) = sim_pair();
    let pd = a.alloc_pd().unwrap();
    let field = |r: Result<SrqId>| match r {
        Err(TransportError::InvalidArgument { source, .. }) => source.field.to_string(),
        other => panic!("seed 1: {other:?} (expected InvalidArgument)"),
    };
    assert_eq!(field(a.create_srq(&SrqInit::new(pd, 0))), "max_wr");
    assert_eq!(field(a.create_srq(&SrqInit { max_sge: 0, ..SrqInit::new(pd, 4) })), "max_sge");
    assert_eq!(field(a.create_srq(&SrqInit { limit: 5, ..SrqInit::new(pd, 4) })), "limit");
    let srq = a.create_srq(&SrqInit::new(pd, 2)).unwrap();
    let mr = a.reg_mr(pd, 4096, Access::LOCAL_WRITE).unwrap();
    let two = [Sge::new(mr.id, 0, 8), Sge::new(mr.id, 8, 8)];
    assert!(matches!(a.post_srq_recv(srq, &RecvWr::new(1, &two)), Err(TransportError::InvalidArgument { .. })));
    let one = [Sge::new(mr.id, 0, 8)];
    a.post_srq_recv(srq, &RecvWr::new(1, &one)).unwrap();
    a.post_srq_recv(srq, &RecvWr::new(2, &one)).unwrap();
    assert!(
        matches!(a.post_srq_recv(srq, &RecvWr::new(3, &one)), Err(TransportError::QueueFull { limit: 2, .. })),
        "seed 1: the third receive of a 2-entry SRQ"
    );
    assert!(matches!(a.dealloc_pd(pd), Err(TransportError::Busy { .. })), "seed 1: the PD holds an SRQ");
    assert!(matches!(a.destroy_srq(SrqId(999)), Err(TransportError::InvalidHandle { .. })));
    a.destroy_srq(srq).unwrap();
    a.dereg_mr(mr.id).unwrap();
    a.dealloc_pd(pd).unwrap();
    assert_eq!(a.poll_async_event().unwrap(), None);
}

//! The fault cases of [`crate::fault_cases`] with a UDP endpoint on one
//! side: its path hook loses or duplicates the chosen packets. Against
//! kernel rxe they show that rxe and this RC engine agree on recovery in
//! both roles; between two UDP endpoints they run in `cargo test`.
//!
//! The fault goes where the UDP endpoint can put it: on its way out when
//! it is the requester (`a`), on its way in when it is the responder (`b`);
//! with UDP on both sides, both (a request fault then acts on each side's
//! own count of packets). Counters come from the UDP sides only.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rctb_core::transport::*;
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_udp::mixed::Either;
use rctb_udp::{Dir, Fate, UdpTransport};

use crate::fault_cases::{self, FaultPath, PacketFault, Recovery};
use rctb_conformance::{CaseResult, Endpoints};

type Ends<'t, O> = Endpoints<'t, Either<UdpTransport, O>>;

/// Runs every fault case whose name contains `filter`.
pub fn run<O: Transport>(
    a: &mut Either<UdpTransport, O>,
    b: &mut Either<UdpTransport, O>,
    filter: &str,
    report: &mut dyn FnMut(&CaseResult),
) -> Vec<CaseResult> {
    fault_cases::run(a, b, &mut UdpPath::default(), filter, report)
}

/// The UDP endpoints' path hooks as a [`FaultPath`].
#[derive(Debug, Default)]
pub struct UdpPath {
    acted: Acted,
}

fn udp<O>(t: &Either<UdpTransport, O>) -> Option<&UdpTransport> {
    match t {
        Either::A(u) => Some(u),
        Either::B(_) => None,
    }
}

/// A request packet (not an ACK, atomic ACK or READ response).
fn is_request(op: Opcode) -> bool {
    !op.is_response()
}

/// A PSN sequence error NAK.
fn is_seq_nak(p: &rctb_udp::Packet) -> bool {
    p.bth.opcode == Opcode::ACKNOWLEDGE && p.aeth.is_some_and(|a| a.kind() == AckKind::Nak(NakCode::PsnSequenceError))
}

impl UdpPath {
    /// Installs `fate` for the request packets of the case: on `a`'s way
    /// out, on `b`'s way in. `fate(n)` decides the n-th request packet
    /// seen (per side).
    fn on_requests<O: Transport>(&self, x: &Ends<'_, O>, fate: impl Fn(u32) -> Fate + Clone + Send + 'static) -> bool {
        self.on_requests_at(x, false, fate)
    }

    /// As [`Self::on_requests`], with `one_side`: only on the first UDP
    /// endpoint (`a`'s way out, else `b`'s way in), for a fault that
    /// counts every transmission and so must not act twice.
    fn on_requests_at<O: Transport>(
        &self,
        x: &Ends<'_, O>,
        one_side: bool,
        fate: impl Fn(u32) -> Fate + Clone + Send + 'static,
    ) -> bool {
        let mut any = false;
        for (t, dir) in [(&*x.a, Dir::Tx), (&*x.b, Dir::Rx)] {
            if one_side && any {
                break;
            }
            if let Some(u) = udp(t) {
                let (n, fate, acted) = (Cell::new(0u32), fate.clone(), self.acted.clone());
                u.set_hook(Some(Box::new(move |d, p| {
                    if d != dir || !is_request(p.bth.opcode) {
                        return Fate::Pass;
                    }
                    n.set(n.get() + 1);
                    let f = fate(n.get() - 1);
                    if f != Fate::Pass {
                        acted.set(acted.get() + 1);
                    }
                    f
                })));
                any = true;
            }
        }
        any
    }

    /// Loses request packet `k` from `a` to `b` and doubles every PSN
    /// sequence NAK from `b` to `a`, on one UDP endpoint only: `a`'s way
    /// out and in, or else `b`'s way in and out.
    fn drop_and_double_naks<O: Transport>(&self, x: &Ends<'_, O>, k: u32) -> bool {
        for (t, req_dir) in [(&*x.a, Dir::Tx), (&*x.b, Dir::Rx)] {
            if let Some(u) = udp(t) {
                let (n, acted) = (Cell::new(0u32), self.acted.clone());
                u.set_hook(Some(Box::new(move |d, p| {
                    let fate = if d == req_dir && is_request(p.bth.opcode) {
                        n.set(n.get() + 1);
                        if n.get() - 1 == k { Fate::Drop } else { Fate::Pass }
                    } else if d != req_dir && is_seq_nak(p) {
                        Fate::Duplicate
                    } else {
                        Fate::Pass
                    };
                    if fate != Fate::Pass {
                        acted.set(acted.get() + 1);
                    }
                    fate
                })));
                return true;
            }
        }
        false
    }

    /// Loses the first `opcode` packet from `b` to `a`: on `a`'s way in, or else on
    /// `b`'s way out.
    fn lose_first<O: Transport>(&self, x: &Ends<'_, O>, opcode: Opcode) -> bool {
        for (t, dir) in [(&*x.a, Dir::Rx), (&*x.b, Dir::Tx)] {
            if let Some(u) = udp(t) {
                let acted = self.acted.clone();
                u.set_hook(Some(Box::new(move |d, p| {
                    if d == dir && p.bth.opcode == opcode && acted.get() == 0 {
                        acted.set(1);
                        Fate::Drop
                    } else {
                        Fate::Pass
                    }
                })));
                return true;
            }
        }
        false
    }
}

impl<O: Transport> FaultPath<Either<UdpTransport, O>> for UdpPath {
    fn install(&mut self, x: &Ends<'_, O>, fault: PacketFault) -> Result<(), String> {
        self.acted.set(0);
        let hooked = match fault {
            PacketFault::DropRequest(k) => self.on_requests(x, move |n| if n == k { Fate::Drop } else { Fate::Pass }),
            PacketFault::DuplicateRequests => self.on_requests(x, |_| Fate::Duplicate),
            PacketFault::DropFirstRequests(k) => {
                self.on_requests_at(x, true, move |n| if n < k { Fate::Drop } else { Fate::Pass })
            }
            PacketFault::DropFirstAck => self.lose_first(x, Opcode::ACKNOWLEDGE),
            PacketFault::DropFirstAtomicAck => self.lose_first(x, Opcode::ATOMIC_ACKNOWLEDGE),
            PacketFault::DropRequestDuplicateNaks(k) => self.drop_and_double_naks(x, k),
        };
        if hooked { Ok(()) } else { Err("no UDP endpoint to put the fault on".into()) }
    }

    fn acted(&self) -> u64 {
        self.acted.get()
    }

    fn clear(&mut self, x: &Ends<'_, O>) {
        for t in [&*x.a, &*x.b] {
            if let Some(u) = udp(t) {
                u.set_hook(None);
            }
        }
    }

    fn recovery(&self, x: &Ends<'_, O>) -> Recovery {
        let (a, b) = (udp(x.a), udp(x.b));
        Recovery {
            naks_received: a.map(|u| u.stats().rx_naks_seq),
            naks_sent: b.map(|u| u.reactor().engine_stats().seq_naks),
            retransmitted: a.map(|u| u.reactor().engine_stats().retransmitted),
            timeouts: a.map(|u| u.reactor().engine_stats().timeouts),
            // The requester's count when it is ours; else the responder's,
            // which sent them.
            rnr_naks: a.map(|u| u.stats().rx_naks_rnr).or_else(|| b.map(|u| u.reactor().engine_stats().rnr_naks)),
        }
    }
}

/// How many packets the hooks acted on: shared by a hook (which the udp
/// driver may move to another thread) and the test that reads it.
#[derive(Clone, Debug, Default)]
struct Acted(Arc<AtomicU64>);

impl Acted {
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }
}

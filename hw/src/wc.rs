//! Work completions: `ibv_wc` to [`Completion`], and the per-QP record of
//! outstanding work requests that names the opcode of failed ones.
//!
//! Verbs defines `opcode` only for successful completions (mlx5 leaves it
//! untouched on errors), while the trait promises "the opcode of the WR
//! when it is known". Each QP therefore remembers the `(wr_id, opcode)` of
//! posted send WRs and the `wr_id` of posted receives, in order, and an
//! error completion takes its opcode from there.

use std::collections::VecDeque;

use rctb_core::transport::{Completion, QpId, WcOpcode, WcStatus};
use rdma_sys::{ibv_wc, ibv_wc_flags, ibv_wc_opcode};

/// The trait's opcode for a raw `ibv_wc_opcode` (`None` for the kinds rctb
/// never posts: atomics, memory windows, TSO).
pub(crate) fn opcode_from_raw(raw: u32) -> Option<WcOpcode> {
    match raw {
        ibv_wc_opcode::IBV_WC_SEND => Some(WcOpcode::Send),
        ibv_wc_opcode::IBV_WC_RDMA_WRITE => Some(WcOpcode::RdmaWrite),
        ibv_wc_opcode::IBV_WC_RDMA_READ => Some(WcOpcode::RdmaRead),
        ibv_wc_opcode::IBV_WC_COMP_SWAP => Some(WcOpcode::CompSwap),
        ibv_wc_opcode::IBV_WC_FETCH_ADD => Some(WcOpcode::FetchAdd),
        ibv_wc_opcode::IBV_WC_RECV => Some(WcOpcode::Recv),
        ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM => Some(WcOpcode::RecvRdmaWithImm),
        _ => None,
    }
}

fn is_recv(op: WcOpcode) -> bool {
    matches!(op, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
}

/// Outstanding work requests of one QP, oldest first.
#[derive(Debug, Default)]
pub(crate) struct WrTracker {
    send: VecDeque<(u64, WcOpcode)>,
    recv: VecDeque<u64>,
    /// At most this many entries per queue are remembered (the QP's
    /// capacity: a correct application never has more outstanding).
    send_cap: usize,
    recv_cap: usize,
    /// The QP takes its receives from a shared receive queue: `recv` stays
    /// empty, and a failed WR that is no known send is one of those.
    shared_recv: bool,
}

impl WrTracker {
    pub(crate) fn new(max_send_wr: u32, max_recv_wr: u32) -> Self {
        WrTracker {
            send: VecDeque::new(),
            recv: VecDeque::new(),
            send_cap: (max_send_wr as usize).max(1),
            recv_cap: (max_recv_wr as usize).max(1),
            shared_recv: false,
        }
    }

    /// Marks the QP as taking its receives from a shared receive queue.
    pub(crate) fn set_shared_recv(&mut self) {
        self.shared_recv = true;
    }

    pub(crate) fn posted_send(&mut self, wr_id: u64, op: WcOpcode) {
        if self.send.len() >= self.send_cap {
            self.send.pop_front();
        }
        self.send.push_back((wr_id, op));
    }

    pub(crate) fn posted_recv(&mut self, wr_id: u64) {
        if self.recv.len() >= self.recv_cap {
            self.recv.pop_front();
        }
        self.recv.push_back(wr_id);
    }

    /// A RESET empties both queues without completions.
    pub(crate) fn clear(&mut self) {
        self.send.clear();
        self.recv.clear();
    }

    /// Retires the send WR `wr_id` and every older one (unsignaled WRs
    /// before a completed one have completed too); returns its opcode.
    fn retire_send(&mut self, wr_id: u64) -> Option<WcOpcode> {
        let pos = self.send.iter().position(|&(id, _)| id == wr_id)?;
        let op = self.send[pos].1;
        self.send.drain(..=pos);
        Some(op)
    }

    fn retire_recv(&mut self, wr_id: u64) -> bool {
        match self.recv.iter().position(|&id| id == wr_id) {
            Some(pos) => {
                self.recv.remove(pos);
                true
            }
            None => false,
        }
    }

    /// The opcode to report for a completion of `wr_id`, retiring the WR.
    /// `reported` is what the provider wrote (trusted on success, only a
    /// hint on error).
    pub(crate) fn complete(&mut self, wr_id: u64, success: bool, reported: Option<WcOpcode>) -> WcOpcode {
        if success {
            let op = reported.unwrap_or(WcOpcode::Send);
            if is_recv(op) {
                self.retire_recv(wr_id);
            } else {
                self.retire_send(wr_id);
            }
            return op;
        }
        let recv_front = self.recv.front() == Some(&wr_id);
        let in_send = self.send.iter().any(|&(id, _)| id == wr_id);
        // A receive is flushed or fails in posting order, so only the oldest
        // receive can be meant; a send may be any (older unsignaled ones
        // completed silently). When both match, the provider's hint decides.
        let take_recv = match (recv_front, in_send) {
            (true, false) => true,
            (false, true) => false,
            (true, true) => reported.is_some_and(is_recv),
            // A QP on an SRQ posts no receives of its own to remember.
            (false, false) if self.shared_recv => return WcOpcode::Recv,
            (false, false) => return reported.unwrap_or(WcOpcode::Send),
        };
        if take_recv {
            self.recv.pop_front();
            WcOpcode::Recv
        } else {
            self.retire_send(wr_id).unwrap_or(WcOpcode::Send)
        }
    }
}

/// Converts one polled `ibv_wc`. `qp` is the QP its `qp_num` belongs to;
/// `tracker` that QP's record, when the QP still exists.
pub(crate) fn completion(wc: &ibv_wc, qp: QpId, tracker: Option<&mut WrTracker>) -> Completion {
    let status = WcStatus::from_raw(wc.status).unwrap_or(WcStatus::GeneralErr);
    let reported = opcode_from_raw(wc.opcode);
    let opcode = match tracker {
        Some(t) => t.complete(wc.wr_id, status.is_success(), reported),
        None => reported.unwrap_or(WcOpcode::Send),
    };
    let imm = (wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 != 0).then(|| {
        // SAFETY: with IBV_WC_WITH_IMM set the union holds `imm_data`; every
        // bit pattern is a valid u32 anyway.
        let raw = unsafe { wc.imm_data_invalidated_rkey_union.imm_data };
        // verbs keeps the immediate in network order; so does the trait.
        u32::from_be(raw)
    });
    Completion { wr_id: wc.wr_id, status, opcode, byte_len: wc.byte_len, imm, qp, vendor_err: wc.vendor_err }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_sys::ibv_wc_status;

    fn wc(wr_id: u64, status: u32, opcode: u32) -> ibv_wc {
        // SAFETY: ibv_wc is plain data; all-zero is valid.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        wc.wr_id = wr_id;
        wc.status = status;
        wc.opcode = opcode;
        wc
    }

    #[test]
    fn immediates_are_wire_order() {
        let mut w = wc(1, ibv_wc_status::IBV_WC_SUCCESS, ibv_wc_opcode::IBV_WC_RECV);
        w.wc_flags = ibv_wc_flags::IBV_WC_WITH_IMM.0;
        // Wire bytes 12 34 56 78 sit in memory in that order.
        w.imm_data_invalidated_rkey_union.imm_data = u32::from_ne_bytes([0x12, 0x34, 0x56, 0x78]);
        w.byte_len = 9;
        w.vendor_err = 3;
        let c = completion(&w, QpId(4), None);
        assert_eq!(c.imm, Some(0x1234_5678));
        assert_eq!((c.opcode, c.byte_len, c.qp, c.vendor_err), (WcOpcode::Recv, 9, QpId(4), 3));
        // No flag, no immediate, whatever the union holds.
        w.wc_flags = 0;
        assert_eq!(completion(&w, QpId(4), None).imm, None);
    }

    #[test]
    fn unknown_status_is_general_error() {
        let c = completion(&wc(1, 999, 0), QpId(1), None);
        assert_eq!(c.status, WcStatus::GeneralErr);
    }

    #[test]
    fn error_completions_take_the_posted_opcode() {
        let mut t = WrTracker::new(8, 8);
        t.posted_send(1, WcOpcode::Send);
        t.posted_send(2, WcOpcode::RdmaWrite);
        t.posted_send(3, WcOpcode::RdmaRead);
        t.posted_recv(10);
        t.posted_recv(11);
        // Signaled #2 succeeds: #1 (unsignaled) retires with it.
        assert_eq!(t.complete(2, true, Some(WcOpcode::RdmaWrite)), WcOpcode::RdmaWrite);
        assert_eq!(t.send.len(), 1);
        // #3 fails; mlx5 leaves the opcode as whatever was in the buffer.
        assert_eq!(t.complete(3, false, Some(WcOpcode::Send)), WcOpcode::RdmaRead);
        // Receives flush in order.
        assert_eq!(t.complete(10, false, None), WcOpcode::Recv);
        assert_eq!(t.complete(11, false, Some(WcOpcode::Send)), WcOpcode::Recv);
        assert!(t.send.is_empty() && t.recv.is_empty());
        // Unknown WR: the provider's word.
        assert_eq!(t.complete(99, false, Some(WcOpcode::RdmaWrite)), WcOpcode::RdmaWrite);
    }

    #[test]
    fn same_wr_id_on_both_queues_follows_the_hint() {
        let mut t = WrTracker::new(8, 8);
        t.posted_send(7, WcOpcode::RdmaWrite);
        t.posted_recv(7);
        assert_eq!(t.complete(7, false, Some(WcOpcode::Recv)), WcOpcode::Recv);
        assert_eq!(t.complete(7, false, None), WcOpcode::RdmaWrite);
    }

    #[test]
    fn srq_receives_fail_as_receives() {
        let mut t = WrTracker::new(8, 8);
        t.set_shared_recv();
        t.posted_send(1, WcOpcode::RdmaWrite);
        // A receive taken from the SRQ: never posted on this QP.
        assert_eq!(t.complete(40, false, Some(WcOpcode::Send)), WcOpcode::Recv);
        assert_eq!(t.complete(1, false, None), WcOpcode::RdmaWrite);
    }

    #[test]
    fn tracker_is_bounded_and_reset_clears() {
        let mut t = WrTracker::new(2, 1);
        for i in 0..10 {
            t.posted_send(i, WcOpcode::Send);
            t.posted_recv(i);
        }
        assert_eq!((t.send.len(), t.recv.len()), (2, 1));
        t.clear();
        assert_eq!((t.send.len(), t.recv.len()), (0, 0));
    }
}

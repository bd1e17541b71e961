//! Releasing a stream: disconnect, move both QPs to ERR, collect the flush
//! completions, destroy everything in child-before-parent order. Failures
//! are recorded, never fatal, so one broken verb does not hide the rest.

use rctb_core::Transport;
use rctb_core::transport::{QpTransition, TransportError, WcStatus};

use super::{End, Phase, Stream};

impl<T: Transport> Stream<T> {
    pub(super) fn teardown(&mut self) {
        let mut problems = Vec::new();
        let mut note = |what: &str, r: Result<(), TransportError>| {
            if let Err(e) = r {
                problems.push(format!("{what}: {e}"));
            }
        };
        for end in [&mut self.req, &mut self.resp] {
            if let Some(conn) = end.conn {
                note("cm_disconnect", end.t.cm_disconnect(conn));
            }
            // rdma_disconnect moves the QP to ERR; a manual QP gets there by hand.
            if let Some(qp) = end.qp {
                note("modify_qp ERR", end.t.modify_qp(qp, &QpTransition::Err));
            }
        }
        note("drain requester CQ", self.drain_requester());
        note("drain responder CQ", self.drain_responder());
        for end in [&mut self.req, &mut self.resp] {
            release(end, &mut note);
        }
        self.stats.local_errors.extend(problems);
        self.phase = Phase::Done;
    }

    fn drain_requester(&mut self) -> Result<(), TransportError> {
        let Some(cq) = self.req.cq else { return Ok(()) };
        let mut comps = Vec::new();
        while self.req.t.poll_cq(cq, 64, &mut comps)? > 0 {}
        for wc in comps {
            // Requests still outstanding at teardown did not get through.
            self.outstanding = self.outstanding.saturating_sub(1);
            *self.stats.errors.entry(wc.status).or_default() += 1;
        }
        Ok(())
    }

    fn drain_responder(&mut self) -> Result<(), TransportError> {
        let (Some(cq), Some(mr)) = (self.resp.cq, self.resp.mr) else { return Ok(()) };
        let mut comps = Vec::new();
        while self.resp.t.poll_cq(cq, 64, &mut comps)? > 0 {}
        for wc in comps {
            match wc.status {
                WcStatus::WrFlushErr => self.stats.recv_flushed += 1,
                // A message that landed just before the end is checked like any other.
                WcStatus::Success => {
                    let index = self.stats.received;
                    self.stats.received += 1;
                    self.check_receive(&wc, index, mr.id)?;
                }
                s => *self.stats.recv_errors.entry(s).or_default() += 1,
            }
        }
        Ok(())
    }
}

fn release<T: Transport>(end: &mut End<T>, note: &mut impl FnMut(&str, Result<(), TransportError>)) {
    if let Some(qp) = end.qp.take() {
        note("destroy_qp", end.t.destroy_qp(qp));
    }
    // Connection ids stay recorded so late CM events are still recognised.
    if let Some(conn) = end.conn {
        note("cm_destroy", end.t.cm_destroy(conn));
    }
    if let Some(listener) = end.listener {
        note("cm_close_listener", end.t.cm_close_listener(listener));
    }
    if let Some(mr) = end.mr.take() {
        note("dereg_mr", end.t.dereg_mr(mr.id));
    }
    if let Some(cq) = end.cq.take() {
        note("destroy_cq", end.t.destroy_cq(cq));
    }
    if let Some(pd) = end.pd.take() {
        note("dealloc_pd", end.t.dealloc_pd(pd));
    }
}

//! An endpoint's completion queues: their entries and requests for
//! notification, and the delivery of completions to them.

use std::collections::VecDeque;

use rctb_core::transport::{AsyncEvent, Completion, CqId, QpId, WcOpcode, WcStatus};

use crate::idmap::IdMap;
use crate::rc::RoutedCompletion;
use crate::rc::ring::Ring;

use super::{Endpoint, EndpointCounters};

#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: u32,
    pub entries: Ring<Wc>,
    /// What the owner asked to be told of next ([`Endpoint::req_notify_cq`]).
    pub notify: Notify,
}

/// A CQ's request for notification (`ibv_req_notify_cq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Notify {
    /// Nothing asked, or the last request already answered.
    #[default]
    Off,
    /// The next completion.
    Next,
    /// The next solicited completion (or failed receive).
    Solicited,
    /// Answered: the owner has not taken the notice yet
    /// ([`Endpoint::poll_cq_notification`]).
    Fired,
}

impl Cq {
    pub(crate) fn new(depth: u32) -> Self {
        Cq { depth, entries: Ring::default(), notify: Notify::Off }
    }

    /// Adds a completion (the caller checked the room), and answers an armed
    /// request for notification that it satisfies.
    #[inline]
    pub(crate) fn push(&mut self, wc: Completion, solicited: bool) {
        self.entries.push_back(Wc(wc));
        if self.notify != Notify::Off {
            self.fire(solicited);
        }
    }

    #[cold]
    fn fire(&mut self, solicited: bool) {
        if self.notify == Notify::Next || (self.notify == Notify::Solicited && solicited) {
            self.notify = Notify::Fired;
        }
    }
}

/// A CQ's slot: a completion (or, in a slot never used, a placeholder;
/// `Ring` keeps every slot holding a value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wc(pub Completion);

impl Default for Wc {
    fn default() -> Self {
        Wc(Completion {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm: None,
            qp: QpId(0),
            vendor_err: 0,
        })
    }
}

/// A completion found its CQ full (kept out of `route`, which stays small
/// enough to inline on the packet path).
#[cold]
fn lose_completion(counters: &mut EndpointCounters, events: &mut VecDeque<AsyncEvent>, cq: CqId) {
    counters.completions_lost += 1;
    events.push_back(AsyncEvent::CqErr { cq });
}

/// Delivers `comps` to their CQs ([`Endpoint::route`]), on the fields
/// alone so that a caller may hold a QP meanwhile.
#[inline(always)]
pub(crate) fn route(
    comps: &mut Vec<RoutedCompletion>,
    cqs: &mut IdMap<Cq>,
    counters: &mut EndpointCounters,
    events: &mut VecDeque<AsyncEvent>,
) {
    // Most calls find nothing to route: that answer inlines everywhere,
    // the loop does not.
    if !comps.is_empty() {
        route_all(comps, cqs, counters, events);
    }
}

#[inline]
fn route_all(
    comps: &mut Vec<RoutedCompletion>,
    cqs: &mut IdMap<Cq>,
    counters: &mut EndpointCounters,
    events: &mut VecDeque<AsyncEvent>,
) {
    for rc in comps.drain(..) {
        if let Some(cq) = cqs.get_mut(rc.cq.0) {
            if cq.entries.len() >= cq.depth as usize {
                lose_completion(counters, events, rc.cq);
            } else {
                cq.push(rc.wc, rc.solicited);
            }
        }
    }
}

impl Endpoint {
    /// Delivers the completions the last action produced to their CQs. A
    /// completion that finds its CQ full is lost and raises
    /// [`AsyncEvent::CqErr`], as rxe's `rxe_cq_post` does.
    #[inline]
    pub(crate) fn route(&mut self) {
        route(&mut self.comps, &mut self.cqs, &mut self.counters, &mut self.async_events);
    }

    /// Asks to be told ([`poll_cq_notification`](Self::poll_cq_notification))
    /// when the next completion reaches `cq`, or with `solicited_only` the
    /// next solicited one (a receive of a message with the solicited-event
    /// bit, or a failed receive), as `ibv_req_notify_cq` does. Completions
    /// already in the CQ do not answer it. Asking again before the notice
    /// was taken changes nothing.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> rctb_core::transport::Result<()> {
        use rctb_core::transport::{TransportError, Verb};
        let c = self.cqs.get_mut(cq.0).ok_or_else(|| TransportError::handle(Verb::PollCq, cq))?;
        match c.notify {
            Notify::Fired => {}
            // `solicited_only` may widen a request to every completion, never narrow one.
            Notify::Next => {}
            Notify::Solicited | Notify::Off => {
                c.notify = if solicited_only { Notify::Solicited } else { Notify::Next };
            }
        }
        if !self.armed_cqs.contains(&cq) {
            self.armed_cqs.push(cq);
        }
        Ok(())
    }

    /// The next CQ whose request for notification was answered, if any;
    /// each answer is given once, and the CQ must be asked again
    /// ([`req_notify_cq`](Self::req_notify_cq)) to be told again.
    pub fn poll_cq_notification(&mut self) -> Option<CqId> {
        let cqs = &mut self.cqs;
        let i = self.armed_cqs.iter().position(|cq| cqs.get(cq.0).is_none_or(|c| c.notify == Notify::Fired))?;
        let cq = self.armed_cqs.swap_remove(i);
        let c = self.cqs.get_mut(cq.0)?;
        c.notify = Notify::Off;
        Some(cq)
    }
}

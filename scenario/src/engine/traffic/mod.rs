//! The verbs-level traffic generator: one [`Stream`] moves `count` messages
//! of one operation (SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM,
//! RDMA_READ) from a requester to a responder and checks every byte.
//!
//! It is generic over [`Transport`], so the same code runs on the simulator
//! and, later, on real verbs. It never blocks: [`Stream::step`] does what can
//! be done now (poll, verify, repost, post) and says whether it made progress,
//! so one thread can drive many streams over one simulated fabric and advance
//! virtual time only when every stream is idle.
//!
//! A stream owns both ends (the requester's and the responder's transport),
//! like pyverbs' client/server "players": the out-of-band channel of a manual
//! connect and the responder-side data checks are plain field accesses. RDMA
//! CM events are delivered by the caller through [`Stream::offer_cm`],
//! because a node's CM event queue is shared by every stream on that node.
//!
//! Not here: building fabrics, fault schedules, expectations (see `runner`).

mod config;
mod connect;
mod datapath;
mod private_data;
mod stats;
mod teardown;

use std::fmt;

use rctb_core::Transport;
use rctb_core::time::Instant;
use rctb_core::transport::{CmEvent, ConnId, CqId, ListenId, MrInfo, PdId, QpId, RemoteAddr, TransportError};

pub use config::{ConnectMode, Op, QpSettings, StreamConfig};
pub use stats::StreamStats;

use crate::pattern::StreamPattern;

/// What a call to [`Stream::step`] achieved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Something happened; call `step` again before advancing time.
    Busy,
    /// Nothing to do until the transport produces a completion or CM event,
    /// or until `wake_at` (when set) passes.
    Idle {
        /// The transport time the stream wants to be stepped again at
        /// regardless (its start time, a timer); `None` when only an event
        /// can wake it.
        wake_at: Option<Instant>,
    },
    /// Finished and torn down; results are final.
    Done,
}

/// Which end of a stream a CM event was seen on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Posts the work requests (the active CM side).
    Requester,
    /// Receives SENDs, exposes memory for WRITE and READ (the passive side).
    Responder,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Before the configured start time.
    Waiting,
    /// CM connect in progress.
    Connecting,
    Running,
    /// Data phase over; resources are released on the next step.
    Closing,
    Done,
}

/// The verbs resources of one end.
struct End<T> {
    t: T,
    pd: Option<PdId>,
    cq: Option<CqId>,
    mr: Option<MrInfo>,
    qp: Option<QpId>,
    conn: Option<ConnId>,
    listener: Option<ListenId>,
}

impl<T> End<T> {
    fn new(t: T) -> Self {
        End { t, pd: None, cq: None, mr: None, qp: None, conn: None, listener: None }
    }
}

/// One traffic stream between a requester and a responder.
pub struct Stream<T: Transport> {
    cfg: StreamConfig,
    pattern: StreamPattern,
    req: End<T>,
    resp: End<T>,
    phase: Phase,
    /// The responder's region as the requester knows it (from CM private
    /// data or the manual exchange).
    remote: Option<RemoteAddr>,
    /// Next message index to post, and the one whose completion comes next.
    next_post: u64,
    next_complete: u64,
    outstanding: u32,
    /// Receives posted so far (they are reposted until `count` are out).
    recvs_posted: u64,
    req_failed: bool,
    resp_failed: bool,
    stats: StreamStats,
    scratch: Vec<u8>,
}

impl<T: Transport> fmt::Debug for Stream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("name", &self.cfg.name)
            .field("phase", &self.phase)
            .field("next_post", &self.next_post)
            .field("outstanding", &self.outstanding)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> Stream<T> {
    /// A stream that will start at `cfg.start`; `run_seed` decides its
    /// payloads, sizes, immediates and (manual connects) PSNs.
    pub fn new(cfg: StreamConfig, run_seed: u64, requester: T, responder: T) -> Self {
        let pattern = StreamPattern::new(run_seed, &cfg.name);
        Stream {
            cfg,
            pattern,
            req: End::new(requester),
            resp: End::new(responder),
            phase: Phase::Waiting,
            remote: None,
            next_post: 0,
            next_complete: 0,
            outstanding: 0,
            recvs_posted: 0,
            req_failed: false,
            resp_failed: false,
            stats: StreamStats::default(),
            scratch: Vec::new(),
        }
    }

    /// The settings the stream was made with.
    pub fn config(&self) -> &StreamConfig {
        &self.cfg
    }

    /// What the stream has counted so far; final once [`Stream::is_done`].
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Whether the stream has finished or was aborted, its verbs resources
    /// torn down.
    pub fn is_done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Does whatever can be done now without waiting.
    pub fn step(&mut self) -> Progress {
        match self.phase {
            Phase::Waiting => {
                let start = Instant::ZERO + self.cfg.start;
                if self.req.t.now() < start {
                    return Progress::Idle { wake_at: Some(start) };
                }
                self.setup();
                Progress::Busy
            }
            Phase::Connecting => Progress::Idle { wake_at: None },
            Phase::Running => self.run_data_path(),
            Phase::Closing => {
                self.teardown();
                Progress::Busy
            }
            Phase::Done => Progress::Done,
        }
    }

    /// Offers a CM event seen on the `role` end's transport. Returns whether
    /// it belonged to this stream (and was handled).
    pub fn offer_cm(&mut self, role: Role, ev: &CmEvent) -> bool {
        let ours = match (role, ev) {
            (Role::Responder, CmEvent::ConnectRequest { listener, .. }) => self.resp.listener == Some(*listener),
            (Role::Responder, ev) => self.resp.conn == Some(ev.conn()),
            (Role::Requester, ev) => self.req.conn == Some(ev.conn()),
        };
        if ours {
            self.handle_cm(role, ev);
        }
        ours
    }

    /// Gives up now (the run hit a limit): releases every resource.
    pub fn abort(&mut self) {
        if !matches!(self.phase, Phase::Done) {
            if self.stats.finished_at.is_none() && self.stats.started_at.is_some() {
                self.stats.finished_at = Some(self.req.t.now());
            }
            self.teardown();
        }
    }

    /// Records a local verb failure and moves to teardown.
    fn fail(&mut self, what: &str, e: TransportError) {
        self.stats.local_errors.push(format!("{what}: {e}"));
        self.close();
    }

    fn close(&mut self) {
        if self.stats.started_at.is_some() && self.stats.finished_at.is_none() {
            self.stats.finished_at = Some(self.req.t.now());
        }
        if self.phase != Phase::Done {
            self.phase = Phase::Closing;
        }
    }
}

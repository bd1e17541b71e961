//! An `op = "rcsession"` stream: the session workload of
//! [`rctb_models::rcsession`] driven by the scenario runner, its
//! counters mapped onto [`StreamStats`] (completed and received = transfers
//! that moved intact; mismatches = bytes of another transfer seen; local
//! errors = broken invariants after the run settles).

use rctb_core::time::Instant;
use rctb_models::rcsession::{Fabric, SessionWorkload, WorkloadConfig};
use rctb_sim::{NodeId, Sim, SimTransport};

use crate::traffic::{Progress, StreamStats};

/// The session workload as a scenario stream.
#[derive(Debug)]
pub struct SessionStream {
    w: SessionWorkload<SimTransport>,
    sim: Sim,
    stats: StreamStats,
    start: Instant,
    settled: bool,
}

impl SessionStream {
    /// The session server on `server` and every client of `cfg` on `client`,
    /// drawn from the simulator's seed; the workload begins at `start`.
    /// Errs with the message of the first server or client that fails to
    /// set up its verbs resources.
    pub fn new(sim: &Sim, cfg: WorkloadConfig, server: NodeId, client: NodeId, start: Instant) -> Result<Self, String> {
        let w = SessionWorkload::new(sim.seed(), cfg, sim.transport(server), |_| sim.transport(client))?;
        Ok(SessionStream { w, sim: sim.clone(), stats: StreamStats::default(), start, settled: false })
    }

    fn sync(&mut self) {
        let s = &self.w.stats;
        self.stats.posted = self.w.started();
        self.stats.completed = s.transfers_ok;
        self.stats.received = s.transfers_ok;
        self.stats.bytes = s.bytes_ok;
        if s.foreign_bytes > 0 {
            self.stats.mismatches = 1;
            self.stats.first_mismatch = Some(format!(
                "{} bytes of another transfer's data ({})",
                s.foreign_bytes,
                s.first_foreign.as_deref().unwrap_or("?")
            ));
        }
    }

    /// Runs the workload one round (nothing before `start`) and says whether
    /// it moved, when it next wants time, or that every transfer is over.
    pub fn step(&mut self) -> Progress {
        if self.settled || self.w.finished() {
            if self.stats.finished_at.is_none() {
                self.stats.finished_at = Some(self.w.now());
            }
            return Progress::Done;
        }
        let now = self.w.now();
        if now < self.start {
            return Progress::Idle { wake_at: Some(self.start) };
        }
        if self.stats.started_at.is_none() {
            self.stats.started_at = Some(now);
        }
        let before = (self.w.stats.clone(), self.w.started());
        self.w.step();
        self.sync();
        if self.w.finished() {
            self.stats.finished_at = Some(now);
            return Progress::Done;
        }
        if (self.w.stats.clone(), self.w.started()) != before {
            return Progress::Busy;
        }
        match self.w.next_wake() {
            Some(t) if t <= now => Progress::Busy,
            wake_at => Progress::Idle { wake_at },
        }
    }

    /// Whether every client has finished its transfers, or the run ended
    /// the stream ([`SessionStream::abort`]).
    pub fn is_done(&self) -> bool {
        self.settled || self.w.finished()
    }

    /// The end of the run: lets every deadline pass so the reaper runs,
    /// checks the invariants, then closes the clients.
    pub fn abort(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.w.settle(&mut SimFabric(&self.sim));
        self.sync();
        let broken = self.w.check();
        self.stats.local_errors.extend(broken.into_iter().filter(|b| b != "not every client finished"));
        self.stats.local_errors.extend(self.w.close_clients());
    }

    /// The workload's counters as a stream's (see the module doc for the
    /// mapping); the invariant checks join `local_errors` at `abort`.
    pub fn stats(&self) -> &StreamStats {
        &self.stats
    }

    /// Counters for the report's note lines.
    pub fn summary(&self) -> String {
        let s = &self.w.stats;
        format!(
            "rcsession: {} GET + {} PUT ok, {} cancelled, {} crashed, {} BUSY, {} WIRE, {} refused (limits)",
            s.gets_ok, s.puts_ok, s.cancelled, s.crashed, s.busy, s.wire, s.refused
        )
    }
}

/// The simulator as the workload's fabric, for its settling loop.
struct SimFabric<'s>(&'s Sim);

impl Fabric for SimFabric<'_> {
    fn now(&self) -> Instant {
        self.0.now()
    }
    fn next_event_at(&self) -> Option<Instant> {
        self.0.next_event_at()
    }
    fn run_until(&mut self, t: Instant) {
        self.0.run_until(t)
    }
}

//! What a [`Driver`]'s owner reads and sets between turns: the clock, the
//! engines, the counters, the path hooks and the capture.

use std::io;

use rctb_core::time::Instant;
use rctb_engine::Resources;

use super::Driver;
use crate::config::PathHook;
use crate::pcap::PcapSink;
use crate::stats::{EngineStats, UdpStats};

impl Driver {
    /// The real time, on the engines' clock.
    pub fn clock_now(&self) -> Instant {
        self.clock.now()
    }

    /// The clock as the last [`turn`](Self::turn) read it (no new reading).
    pub fn last_now(&self) -> Instant {
        self.now
    }

    /// Endpoint `i`'s RC engine (the verbs that start no protocol work, the getters).
    pub fn engine(&self, i: usize) -> &rctb_engine::Endpoint {
        &self.endpoints[i].engine
    }

    /// Endpoint `i`'s RC engine, and the time to stamp a verb with: the
    /// clock read now. Frames the verb makes leave at the next [`turn`](Self::turn).
    pub fn engine_mut(&mut self, i: usize) -> (&mut rctb_engine::Endpoint, Instant) {
        let now = self.advance();
        (&mut self.endpoints[i].engine, now)
    }

    /// [`engine_mut`](Self::engine_mut) with the clock as last read (no new
    /// reading): for verbs that start no protocol work (polling a CQ,
    /// arming it), or right after an [`advance`](Self::advance).
    pub fn engine_mut_at_last(&mut self, i: usize) -> (&mut rctb_engine::Endpoint, Instant) {
        (&mut self.endpoints[i].engine, self.now)
    }

    /// Endpoint `i`'s socket counters.
    pub fn stats(&self, i: usize) -> UdpStats {
        self.endpoints[i].stats
    }

    /// The descriptors that become readable when a frame arrives.
    pub fn rx_fds(&self) -> Vec<std::os::fd::BorrowedFd<'_>> {
        self.endpoints.iter().map(|e| e.sockets.rx_fd()).collect()
    }

    /// Replaces endpoint `i`'s path hook.
    pub fn set_hook(&mut self, i: usize, hook: Option<PathHook>) {
        self.endpoints[i].hook = hook;
    }

    /// The engines' counters with what the reactor counted around them.
    pub fn engine_stats(&self) -> EngineStats {
        let mut s = self.counters.with_sent(&self.sent);
        for e in &self.endpoints {
            let c = e.engine.counters();
            s.retransmitted += c.retransmitted;
            s.timeouts += c.timeouts;
            s.atomics_replayed += c.atomics_replayed;
            s.seq_naks_ignored += c.seq_naks_ignored;
        }
        s.clock_reads = self.clock.reads.get();
        s
    }

    /// The verbs objects alive on every endpoint, summed.
    pub fn resources(&self) -> Resources {
        let mut r = Resources::default();
        for e in &self.endpoints {
            let x = e.engine.resources();
            r.pds += x.pds;
            r.mrs += x.mrs;
            r.cqs += x.cqs;
            r.qps += x.qps;
        }
        r
    }

    /// Starts recording every frame sent, in memory ([`take_pcap`](Self::take_pcap)).
    pub fn enable_pcap(&mut self) {
        self.pcap = Some(PcapSink::new());
    }

    /// Starts recording every frame sent into the file at `path` (created
    /// or truncated), written as the frames go.
    pub fn enable_pcap_file(&mut self, path: &std::path::Path) -> io::Result<()> {
        self.pcap = Some(PcapSink::file(path)?);
        Ok(())
    }

    /// Writes out what the file capture holds in its buffer.
    pub fn flush_pcap(&mut self) {
        if let Some(p) = self.pcap.as_mut() {
            p.flush();
        }
    }

    /// The in-memory capture recorded so far (recording stops).
    pub fn take_pcap(&mut self) -> Option<Vec<u8>> {
        self.pcap.take().and_then(PcapSink::into_bytes)
    }
}

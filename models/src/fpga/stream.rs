//! Frame streaming on the engine's connected QP: what to stream, its
//! progress, and the windowed SEND_WITH_IMM posts that carry it.

use rctb_core::time::{Duration, Instant};
use rctb_core::transport::*;

#[cfg(doc)]
use rctb_core::roce::prbs;

use super::{EngineError, EngineQp, FpgaEngine};

/// What to stream: frame `i` goes on `channels[i % channels.len()]` with
/// length `sizes[i % sizes.len()]`, ring position `i mod 2^24`, and is posted
/// no earlier than `start + i * gap`. At most `window` sends are outstanding.
// Not non_exhaustive: every field is the caller's choice (there is no
// default stream), so callers build it whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// The channels frames go on, in turn.
    pub channels: Vec<u8>,
    /// Frame lengths in bytes, in turn.
    pub sizes: Vec<u32>,
    /// Frames to send.
    pub count: u64,
    /// The least time between two frames' posts.
    pub gap: Duration,
    /// Sends outstanding at most.
    pub window: u32,
    /// What the frames carry.
    pub payload: Payload,
}

/// What a frame carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Payload {
    /// [`prbs()`] of (channel, ring position): every byte can be checked.
    #[default]
    Prbs,
    /// Whatever the staging region holds (zeros): no generation cost, for
    /// throughput measurements where the receiver does not check data.
    Unchecked,
}

impl StreamConfig {
    fn validate(&self, max_send_wr: u32, staging: u64) -> Result<(), InvalidValue> {
        if self.channels.is_empty() {
            return Err(InvalidValue::new("channels", 0, "at least one channel"));
        }
        if self.sizes.is_empty() || self.sizes.contains(&0) {
            return Err(InvalidValue::new("sizes", 0, "at least one size, each > 0"));
        }
        if self.window == 0 || self.window > max_send_wr {
            return Err(InvalidValue::new("window", self.window as u64, "must be 1..=the QP's max_send_wr (32)"));
        }
        let max = *self.sizes.iter().max().expect("checked non-empty") as u64;
        if max * self.window as u64 > staging {
            return Err(InvalidValue::new("sizes", max, "window x largest size must fit the engine's MR"));
        }
        Ok(())
    }
}

/// Progress of a stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Frames posted.
    pub posted: u64,
    /// Frames whose send completed successfully.
    pub completed: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Error completions of the engine's sends (e.g. RETRY_EXC_ERR).
    pub errors: Vec<WcStatus>,
}

pub(super) struct Stream {
    cfg: StreamConfig,
    /// The connected QP and the staging MR, looked up once when the stream
    /// starts (destroying the QP or a soft reset ends the stream).
    q: EngineQp,
    mr: MrInfo,
    /// Staging bytes per window slot: the largest frame.
    slot_len: u64,
    /// The next frame's (number `stats.posted`) index in `cfg.channels`,
    /// in `cfg.sizes` and its window slot: the frame number modulo each,
    /// kept as cursors so that a frame costs no division.
    next_channel: usize,
    next_size: usize,
    next_slot: u64,
    /// Unsignalled sends still to go before the next signalled one.
    until_signal: u32,
    start: Instant,
    stats: StreamStats,
    outstanding: u32,
    /// Frames `0..retired` are accounted for (completed or failed).
    retired: u64,
    /// One send in this many is signalled (the stream's last always is).
    signal_every: u32,
}

/// `i` stepped past the end of a list of `len` goes back to 0 (a cursor's
/// increment modulo `len`, without a division).
fn wrap<N: PartialEq + Default>(i: N, len: N) -> N {
    if i == len { N::default() } else { i }
}

impl<T: Transport> FpgaEngine<T> {
    /// Starts streaming on the connected QP; frames go out as [`pump`](Self::pump) runs.
    pub fn start_stream(&mut self, cfg: StreamConfig) -> Result<(), EngineError> {
        let (q, mr) = self.session()?;
        cfg.validate(32, mr.len)?;
        if self.signal_every > cfg.window {
            return Err(InvalidValue::new(
                "signal_every",
                self.signal_every as u64,
                "must be 1..=the stream's window (a window of unsignalled sends never completes)",
            )
            .into());
        }
        let slot_len = *cfg.sizes.iter().max().expect("validated") as u64;
        self.stream = Some(Stream {
            cfg,
            q,
            mr,
            slot_len,
            next_channel: 0,
            next_size: 0,
            next_slot: 0,
            until_signal: self.signal_every - 1,
            start: self.t.now(),
            stats: StreamStats::default(),
            outstanding: 0,
            retired: 0,
            signal_every: self.signal_every,
        });
        Ok(())
    }

    /// Reaps send completions and posts every frame that is due and fits the
    /// window. Returns when the next frame is due (`None`: nothing left to
    /// post, or waiting for completions only).
    ///
    /// Per frame this does what the FPGA's streaming engine does: take the
    /// next slot of the staging region, post it, count it. The QP, MR and
    /// slot size are looked up when the stream starts, not per call.
    pub fn pump(&mut self) -> Result<Option<Instant>, EngineError> {
        if self.qps.is_empty() || self.mrs.is_empty() {
            return Err(EngineError::NotConnected);
        }
        let Some(s) = self.stream.as_mut() else { return Ok(None) };
        Self::pump_stream(&mut self.t, &mut self.scratch, &mut self.frame, s)
    }

    fn pump_stream(
        t: &mut T,
        scratch: &mut Vec<Completion>,
        frame: &mut Vec<u8>,
        s: &mut Stream,
    ) -> Result<Option<Instant>, EngineError> {
        scratch.clear();
        t.poll_cq(s.q.cq, usize::MAX, scratch)?;
        for c in scratch.iter() {
            // The completion of send `wr_id` retires it and the unsignalled
            // sends before it (RC completes sends in order); a completion
            // for a send already retired, or not posted, retires nothing.
            let n = c.wr_id.saturating_add(1).saturating_sub(s.retired).min(s.outstanding as u64);
            s.retired += n;
            s.outstanding -= n as u32;
            s.stats.completed += n;
            if !c.status.is_success() {
                s.stats.errors.push(c.status);
            }
        }
        while s.stats.posted < s.cfg.count && s.outstanding < s.cfg.window && s.stats.errors.is_empty() {
            let i = s.stats.posted;
            // (No clock read without pacing: a clock read can cost a system
            // call, e.g. on a VM whose clocksource is the HPET.)
            if !s.cfg.gap.is_zero() {
                let due = s.start + s.cfg.gap * (i as u32);
                if t.now() < due {
                    return Ok(Some(due));
                }
            }
            let channel = s.cfg.channels[s.next_channel];
            let len = s.cfg.sizes[s.next_size];
            let ring = (i as u32) & MAX_24BIT;
            let offset = s.next_slot * s.slot_len;
            if s.cfg.payload == Payload::Prbs {
                frame.resize(len as usize, 0);
                rctb_core::roce::prbs_fill(channel, ring, frame);
                t.mr_write(s.mr.id, offset, frame)?;
            }
            let sge = [Sge::new(s.mr.id, offset, len)];
            let imm = (ring << 8) | channel as u32;
            let wr = SendWr::new(i, SendOp::SendWithImm { imm }, &sge);
            // Send i is signalled when (i + 1) is a multiple of signal_every.
            let signaled = s.until_signal == 0 || i + 1 == s.cfg.count;
            let wr = if signaled { wr } else { wr.unsignaled() };
            t.post_send(s.q.qp.id, &wr)?;
            s.outstanding += 1;
            s.stats.posted += 1;
            s.stats.bytes += len as u64;
            s.until_signal = s.until_signal.checked_sub(1).unwrap_or(s.signal_every - 1);
            s.next_channel = wrap(s.next_channel + 1, s.cfg.channels.len());
            s.next_size = wrap(s.next_size + 1, s.cfg.sizes.len());
            s.next_slot = wrap(s.next_slot + 1, s.cfg.window as u64);
        }
        Ok(None)
    }

    /// Progress of the current stream.
    pub fn stream_stats(&self) -> Option<&StreamStats> {
        self.stream.as_ref().map(|s| &s.stats)
    }
}

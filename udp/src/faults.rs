//! Seeded faults on a real wire, decided per packet rather than per draw.
//!
//! On the simulator one seed fixes the whole run. On a real wire, threads
//! and the kernel's scheduling change the order in which packets meet a
//! random number generator, so a sequential draw would lose different
//! packets on every run. Here a packet's fate is a hash of the seed and the
//! packet's identity: its destination QPN, PSN and opcode, its direction,
//! and which transmission of that packet it is (the first, the first
//! retransmission, ...). The same packets are lost, duplicated or held on
//! every run, and a retransmission gets a fresh fate, so recovery always
//! makes progress.
//!
//! The text form is what the `RCTB_IBV_FAULTS` variable of the verbs
//! library holds: `seed=7,drop=0.01,dup=0.001,reorder=0.01,delay=0.001,delay_us=2000`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use rctb_core::time::Duration;
use rctb_engine::Packet;
// splitmix64's finalizer: every input bit reaches every output bit.
use rctb_transport::seed::splitmix64 as mix;
use thiserror::Error;

use crate::config::{Dir, Fate, PathHook};

/// How long a reordered packet is held: long enough for the packets sent
/// after it on a busy path to overtake it, short against any RC timer.
pub const REORDER_HOLD: Duration = Duration::from_micros(100);

/// What fraction of packets meets each fault, and the seed that picks them.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct FaultSpec {
    /// Picks which packets; the same seed picks the same packets.
    pub seed: u64,
    /// Probability a packet is lost.
    pub drop: f64,
    /// Probability a packet is sent twice.
    pub dup: f64,
    /// Probability a packet is held back [`REORDER_HOLD`], so that later ones pass it.
    pub reorder: f64,
    /// Probability a packet is held back `delay_us`.
    pub delay: f64,
    /// How long a delayed packet waits, in microseconds.
    pub delay_us: u64,
}

impl Default for FaultSpec {
    fn default() -> Self {
        FaultSpec { seed: 0, drop: 0.0, dup: 0.0, reorder: 0.0, delay: 0.0, delay_us: 2000 }
    }
}

/// A fault specification that does not parse, naming the field and the rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[error("fault spec: {field}={value:?}: {rule}")]
pub struct FaultSpecError {
    /// The key (or the whole item when it is no `key=value`).
    pub field: String,
    /// The value given.
    pub value: String,
    /// What it must be.
    pub rule: &'static str,
}

impl FromStr for FaultSpec {
    type Err = FaultSpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = FaultSpec::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let err =
                |field: &str, value: &str, rule| FaultSpecError { field: field.into(), value: value.into(), rule };
            let (key, value) = item.split_once('=').ok_or_else(|| err(item, "", "each item is key=value"))?;
            let (key, value) = (key.trim(), value.trim());
            let prob = || match value.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(err(key, value, "a probability from 0 to 1")),
            };
            match key {
                "seed" => spec.seed = value.parse().map_err(|_| err(key, value, "an unsigned 64-bit integer"))?,
                "drop" => spec.drop = prob()?,
                "dup" => spec.dup = prob()?,
                "reorder" => spec.reorder = prob()?,
                "delay" => spec.delay = prob()?,
                "delay_us" => match value.parse::<u64>() {
                    Ok(us) if us <= 10_000_000 => spec.delay_us = us,
                    _ => return Err(err(key, value, "microseconds, 0 to 10000000")),
                },
                _ => return Err(err(key, value, "keys are seed, drop, dup, reorder, delay, delay_us")),
            }
        }
        if spec.drop + spec.dup + spec.reorder + spec.delay > 1.0 {
            return Err(FaultSpecError {
                field: "drop+dup+reorder+delay".into(),
                value: s.into(),
                rule: "the probabilities add up to at most 1",
            });
        }
        Ok(spec)
    }
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let FaultSpec { seed, drop, dup, reorder, delay, delay_us } = self;
        write!(f, "seed={seed},drop={drop},dup={dup},reorder={reorder},delay={delay},delay_us={delay_us}")
    }
}

/// Packets whose transmissions are counted at once. The least recently
/// sent is forgotten first: a packet being sent again and again (the oldest
/// of a window that keeps losing something) is always recent, so its count
/// is never lost while it matters.
const SEEN_MAX: usize = 1 << 16;

/// The fates of one endpoint's packets under a [`FaultSpec`].
#[derive(Clone)]
pub struct PacketFaults {
    spec: FaultSpec,
    /// Packet key -> (times seen, when last seen).
    seen: BTreeMap<u64, (u32, u64)>,
    /// When last seen -> packet key: the order to forget them in.
    by_age: BTreeMap<u64, u64>,
    clock: u64,
}

impl fmt::Debug for PacketFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacketFaults").field("spec", &self.spec).finish_non_exhaustive()
    }
}

impl PacketFaults {
    /// The fates `spec` gives.
    pub fn new(spec: FaultSpec) -> Self {
        PacketFaults { spec, seen: BTreeMap::new(), by_age: BTreeMap::new(), clock: 0 }
    }

    /// How many times `key` was seen before (0 the first time), counting this one.
    fn count(&mut self, key: u64) -> u32 {
        self.clock += 1;
        let now = self.clock;
        let nth = match self.seen.get_mut(&key) {
            Some((n, at)) => {
                self.by_age.remove(at);
                *n += 1;
                *at = now;
                *n
            }
            None => {
                self.seen.insert(key, (0, now));
                0
            }
        };
        self.by_age.insert(now, key);
        if self.seen.len() > SEEN_MAX
            && let Some((_, oldest)) = self.by_age.pop_first()
        {
            self.seen.remove(&oldest);
        }
        nth
    }

    /// The specification.
    pub fn spec(&self) -> FaultSpec {
        self.spec
    }

    /// The fate of `pkt` going `dir`, counting it as one more transmission.
    pub fn fate(&mut self, dir: Dir, pkt: &Packet) -> Fate {
        let s = self.spec;
        if s.drop + s.dup + s.reorder + s.delay == 0.0 {
            return Fate::Pass;
        }
        let key = packet_key(dir, pkt);
        let nth = self.count(key);
        let u = unit(mix(s.seed ^ mix(key ^ ((nth as u64) << 40))));
        let mut edge = s.drop;
        if u < edge {
            return Fate::Drop;
        }
        edge += s.dup;
        if u < edge {
            return Fate::Duplicate;
        }
        edge += s.reorder;
        if u < edge {
            return Fate::Delay(REORDER_HOLD);
        }
        edge += s.delay;
        if u < edge {
            return Fate::Delay(Duration::from_micros(s.delay_us));
        }
        Fate::Pass
    }

    /// As a hook for a [`UdpConfig`](crate::UdpConfig).
    pub fn into_hook(mut self) -> PathHook {
        Box::new(move |dir, pkt| self.fate(dir, pkt))
    }
}

/// What identifies a packet across its retransmissions: where it goes
/// (QPN), its PSN, its opcode and its direction. CM MADs (QP1) add their
/// transaction's first payload bytes, which differ per MAD.
fn packet_key(dir: Dir, pkt: &Packet) -> u64 {
    let mut k = (pkt.bth.dest_qp as u64) << 32 | pkt.bth.psn.get() as u64;
    k ^= (pkt.bth.opcode.0 as u64) << 24 ^ ((dir == Dir::Rx) as u64) << 63;
    if pkt.deth.is_some() {
        // A MAD's class, method and transaction id (its first 16 bytes).
        for chunk in pkt.payload.chunks(8).take(2) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            k = mix(k ^ u64::from_le_bytes(b));
        }
    }
    k
}

/// A uniform value in [0, 1) from 53 bits of `x`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctb_core::transport::Psn;
    use rctb_core::wire::roce::{Bth, Opcode};

    fn pkt(qpn: u32, psn: u32) -> Packet {
        let mut p = Packet::empty(Vec::new());
        p.bth = Bth::new(Opcode::SEND_ONLY, qpn, Psn::wrapping(psn));
        p
    }

    #[test]
    fn parses_the_documented_form_and_names_bad_fields() {
        let s: FaultSpec = "seed=7, drop=0.01,dup=0.001,reorder=0.02,delay=0.001,delay_us=500".parse().unwrap();
        assert_eq!((s.seed, s.drop, s.dup, s.reorder, s.delay, s.delay_us), (7, 0.01, 0.001, 0.02, 0.001, 500));
        assert_eq!(s.to_string().parse::<FaultSpec>().unwrap(), s);
        let e = "drop=1.5".parse::<FaultSpec>().unwrap_err();
        assert_eq!((e.field.as_str(), e.rule), ("drop", "a probability from 0 to 1"));
        let e = "lose=0.1".parse::<FaultSpec>().unwrap_err();
        assert_eq!(e.field, "lose");
        let e = "drop".parse::<FaultSpec>().unwrap_err();
        assert_eq!(e.rule, "each item is key=value");
        let e = "drop=0.6,dup=0.6".parse::<FaultSpec>().unwrap_err();
        assert_eq!(e.rule, "the probabilities add up to at most 1");
        assert_eq!("".parse::<FaultSpec>().unwrap(), FaultSpec::default());
    }

    #[test]
    fn the_same_packets_meet_the_same_fate_in_any_order() {
        let spec: FaultSpec = "seed=7,drop=0.2,dup=0.1,reorder=0.1".parse().unwrap();
        let (mut a, mut b) = (PacketFaults::new(spec), PacketFaults::new(spec));
        let fates_a: Vec<Fate> = (0..500).map(|psn| a.fate(Dir::Tx, &pkt(0x11, psn))).collect();
        // The same packets, interleaved with another QP's, in reverse.
        let mut fates_b = vec![Fate::Pass; 500];
        for psn in (0..500).rev() {
            fates_b[psn as usize] = b.fate(Dir::Tx, &pkt(0x11, psn));
            b.fate(Dir::Tx, &pkt(0x12, psn));
        }
        assert_eq!(fates_a, fates_b);
        let dropped = fates_a.iter().filter(|f| **f == Fate::Drop).count();
        assert!((60..=140).contains(&dropped), "{dropped} of 500 dropped at p=0.2");
        assert!(fates_a.contains(&Fate::Duplicate) && fates_a.contains(&Fate::Delay(REORDER_HOLD)));
        // Another seed picks other packets.
        let mut c = PacketFaults::new(FaultSpec { seed: 8, ..spec });
        let fates_c: Vec<Fate> = (0..500).map(|psn| c.fate(Dir::Tx, &pkt(0x11, psn))).collect();
        assert_ne!(fates_a, fates_c);
    }

    #[test]
    fn a_retransmission_gets_a_fate_of_its_own() {
        let spec: FaultSpec = "seed=1,drop=0.5".parse().unwrap();
        let mut f = PacketFaults::new(spec);
        // Every packet is eventually let through: no packet is lost forever.
        for psn in 0..200 {
            let tries = (0..64).position(|_| f.fate(Dir::Tx, &pkt(0x11, psn)) == Fate::Pass);
            assert!(tries.is_some(), "PSN {psn} dropped 64 times in a row");
        }
        // And the sequence of fates of one packet repeats under the same seed.
        let seq = |f: &mut PacketFaults| (0..16).map(|_| f.fate(Dir::Tx, &pkt(0x20, 5))).collect::<Vec<_>>();
        assert_eq!(seq(&mut PacketFaults::new(spec)), seq(&mut PacketFaults::new(spec)));
    }

    #[test]
    fn every_packet_of_a_window_sent_again_and_again_gets_through() {
        // A go-back-N sender that keeps losing something sends the same
        // window of 1024 packets round after round: each must pass within a
        // few rounds, whatever other packets share the counting with it. (A
        // count table where two packets of one window could evict each
        // other restarted both at their first fate every round: a dropped
        // one stayed dropped, and ib_write_bw under faults hung.)
        let spec: FaultSpec = "seed=7,drop=0.01,dup=0.005,reorder=0.01".parse().unwrap();
        for window in 0..32u32 {
            let (qpn, base) = (0x11 + window % 4, window * 0x1_0000);
            let mut f = PacketFaults::new(spec);
            let mut passed = vec![false; 1024];
            for _round in 0..8 {
                for (i, ok) in passed.iter_mut().enumerate() {
                    if f.fate(Dir::Tx, &pkt(qpn, base + i as u32)) != Fate::Drop {
                        *ok = true;
                    }
                }
            }
            let stuck: Vec<usize> = (0..1024).filter(|&i| !passed[i]).collect();
            assert!(stuck.is_empty(), "QPN {qpn:#x} from PSN {base:#x}: dropped in all 8 rounds: {stuck:?}");
        }
    }

    #[test]
    fn no_fault_means_every_packet_passes() {
        let mut f = PacketFaults::new(FaultSpec::default());
        assert!((0..100).all(|psn| f.fate(Dir::Tx, &pkt(0x11, psn)) == Fate::Pass));
    }
}

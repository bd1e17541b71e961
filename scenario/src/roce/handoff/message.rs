//! The four messages and their one-line text form.

use super::*;

/// Host -> FPGA: what the engine's setup takes (rogue `getHostParams`), the
/// host's GID, the path MTU to use and the largest frame the host accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostMsg {
    /// `qpn`, `rq_psn`, `sq_psn` (24 bits each), `mr_addr`, `mr_len`
    /// (1..=2^32-1 bytes) and `rkey`.
    pub params: HostParams,
    /// `gid`: the host QP's source GID, which the FPGA sends to.
    pub gid: Gid,
    /// `pmtu`: the path MTU both QPs use, in bytes on the line (256, 512,
    /// 1024, 2048 or 4096).
    pub pmtu: Mtu,
    /// `max_payload`: the largest frame in bytes the host accepts
    /// (1..=2^32-1); `fpga-emu` refuses a `--size` above it.
    pub max_payload: u32,
}

/// FPGA -> host: what `complete_connection` takes, and the FPGA's GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpgaMsg {
    /// `qpn`: the FPGA's QP number (24 bits), the host QP's RTR dest QPN.
    pub qpn: Qpn,
    /// `lkey`: the key of the FPGA's staging region.
    pub lkey: u32,
    /// `gid`: the FPGA's GID, the host QP's RTR destination.
    pub gid: Gid,
}

/// FPGA -> host: the stream is over; frames and bytes whose sends completed
/// successfully, and how many failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DoneMsg {
    /// `frames`: frames whose send completed successfully.
    pub frames: u64,
    /// `bytes`: payload bytes of those frames.
    pub bytes: u64,
    /// `errors`: sends that completed with an error status.
    pub errors: u64,
}

/// One hand-off message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message {
    /// `host ...`: the host's parameters, first on `--host-params`.
    Host(HostMsg),
    /// `fpga ...`: the FPGA's answer, first on `--fpga-params`.
    Fpga(FpgaMsg),
    /// `ready`: the host QP is in RTS with every receive posted, so the
    /// FPGA may start streaming.
    Ready,
    /// `done ...`: the FPGA's totals once its stream is over.
    Done(DoneMsg),
}

impl Message {
    /// The message's first word: `host`, `fpga`, `ready` or `done` (what
    /// [`HandoffIn::expect`] and [`HandoffIn::poll`] compare with).
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Host(_) => "host",
            Message::Fpga(_) => "fpga",
            Message::Ready => "ready",
            Message::Done(_) => "done",
        }
    }

    /// Parses one line (`line` numbers it in errors). Every field of the
    /// kind must be given once, in any order; a malformed line is the
    /// [`HandoffError`] naming the message, the field and the rule.
    pub fn parse(text: &str, line: usize) -> Result<Message, HandoffError> {
        let mut words = text.split_whitespace();
        let Some(kind) = words.next() else { return Err(HandoffError::Empty { line }) };
        let (kind, known): (&'static str, &'static [&'static str]) = match kind {
            "host" => ("host", &["qpn", "rq_psn", "sq_psn", "mr_addr", "mr_len", "rkey", "gid", "pmtu", "max_payload"]),
            "fpga" => ("fpga", &["qpn", "lkey", "gid"]),
            "ready" => ("ready", &[]),
            "done" => ("done", &["frames", "bytes", "errors"]),
            other => return Err(HandoffError::UnknownMessage { line, kind: other.to_string() }),
        };
        let mut f = Fields { line, kind, values: Vec::new() };
        for token in words {
            let Some((key, value)) = token.split_once('=') else {
                return Err(HandoffError::Syntax { line, kind, token: token.to_string() });
            };
            let Some(&field) = known.iter().find(|k| **k == key) else {
                return Err(HandoffError::UnknownField {
                    line,
                    kind,
                    field: key.to_string(),
                    known: match kind {
                        "host" => "qpn, rq_psn, sq_psn, mr_addr, mr_len, rkey, gid, pmtu, max_payload",
                        "fpga" => "qpn, lkey, gid",
                        "done" => "frames, bytes, errors",
                        _ => "none",
                    },
                });
            };
            if f.values.iter().any(|(k, _)| *k == field) {
                return Err(HandoffError::Duplicate { line, kind, field: key.to_string() });
            }
            f.values.push((field, value));
        }
        Ok(match kind {
            "host" => {
                let params = HostParams {
                    qpn: f.num24("qpn")?,
                    rq_psn: Psn::wrapping(f.num24("rq_psn")?),
                    sq_psn: Psn::wrapping(f.num24("sq_psn")?),
                    mr_addr: f.num("mr_addr", u64::MAX, "must be 0..=2^64-1")?,
                    mr_len: f.nonzero(
                        "mr_len",
                        (1 << 32) - 1,
                        "must be 1..=2^32-1 (the engine's length is 32 bits)",
                    )?,
                    rkey: f.num("rkey", u32::MAX as u64, "must fit 32 bits")? as u32,
                };
                let pmtu = f.get("pmtu")?;
                let pmtu = parse_u64(pmtu)
                    .and_then(|b| u32::try_from(b).ok())
                    .and_then(|b| Mtu::from_bytes(b).ok())
                    .ok_or_else(|| f.bad("pmtu", pmtu, "must be 256, 512, 1024, 2048 or 4096"))?;
                Message::Host(HostMsg {
                    params,
                    gid: f.gid()?,
                    pmtu,
                    max_payload: f.nonzero("max_payload", u32::MAX as u64, "must be 1..=2^32-1")? as u32,
                })
            }
            "fpga" => Message::Fpga(FpgaMsg {
                qpn: f.num24("qpn")?,
                lkey: f.num("lkey", u32::MAX as u64, "must fit 32 bits")? as u32,
                gid: f.gid()?,
            }),
            "ready" => Message::Ready,
            _ => Message::Done(DoneMsg {
                frames: f.num("frames", u64::MAX, "a count")?,
                bytes: f.num("bytes", u64::MAX, "a count")?,
                errors: f.num("errors", u64::MAX, "a count")?,
            }),
        })
    }
}

impl fmt::Display for Message {
    /// The line (without its newline) that [`Message::parse`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Host(h) => write!(
                f,
                "host qpn={:#08x} rq_psn={:#08x} sq_psn={:#08x} mr_addr={:#x} mr_len={} rkey={:#010x} gid={} pmtu={} max_payload={}",
                h.params.qpn,
                h.params.rq_psn.get(),
                h.params.sq_psn.get(),
                h.params.mr_addr,
                h.params.mr_len,
                h.params.rkey,
                h.gid,
                h.pmtu.bytes(),
                h.max_payload
            ),
            Message::Fpga(m) => write!(f, "fpga qpn={:#08x} lkey={:#010x} gid={}", m.qpn, m.lkey, m.gid),
            Message::Ready => f.write_str("ready"),
            Message::Done(d) => write!(f, "done frames={} bytes={} errors={}", d.frames, d.bytes, d.errors),
        }
    }
}

fn parse_u64(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Eight groups of four hex digits separated by colons (sysfs and rogue).
pub fn parse_gid(text: &str) -> Option<Gid> {
    let mut gid = [0u8; 16];
    let mut groups = text.split(':');
    for pair in gid.chunks_mut(2) {
        let group = groups.next()?;
        if group.len() != 4 {
            return None;
        }
        pair.copy_from_slice(&u16::from_str_radix(group, 16).ok()?.to_be_bytes());
    }
    groups.next().is_none().then_some(Gid(gid))
}

struct Fields<'a> {
    line: usize,
    kind: &'static str,
    values: Vec<(&'static str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn get(&self, field: &'static str) -> Result<&'a str, HandoffError> {
        self.values.iter().find(|(k, _)| *k == field).map(|(_, v)| *v).ok_or(HandoffError::Missing {
            line: self.line,
            kind: self.kind,
            field,
        })
    }
    fn bad(&self, field: &'static str, value: &str, rule: &'static str) -> HandoffError {
        HandoffError::BadValue { line: self.line, kind: self.kind, field, value: value.to_string(), rule }
    }
    fn num(&self, field: &'static str, max: u64, rule: &'static str) -> Result<u64, HandoffError> {
        let v = self.get(field)?;
        parse_u64(v).filter(|n| *n <= max).ok_or_else(|| self.bad(field, v, rule))
    }
    fn nonzero(&self, field: &'static str, max: u64, rule: &'static str) -> Result<u64, HandoffError> {
        let v = self.get(field)?;
        parse_u64(v).filter(|n| (1..=max).contains(n)).ok_or_else(|| self.bad(field, v, rule))
    }
    fn num24(&self, field: &'static str) -> Result<u32, HandoffError> {
        Ok(self.num(field, MAX_24BIT as u64, "must fit 24 bits (0..=0xffffff)")? as u32)
    }
    fn gid(&self) -> Result<Gid, HandoffError> {
        let v = self.get("gid")?;
        parse_gid(v).ok_or_else(|| self.bad("gid", v, "must be 8 groups of 4 hex digits joined by ':'"))
    }
}

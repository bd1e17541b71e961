//! The connection hand-off between `rctb roce-rx` (the host) and
//! `rctb fpga-emu` (the FPGA engine), in place of the register writes a host
//! driver makes to a real FPGA.
//!
//! One message per line, `KIND key=value ...`, in this order:
//!
//! ```text
//! host  qpn=0x000011 rq_psn=0x3a1b2c sq_psn=0x0c0ffe mr_addr=0x7f2a00000000 mr_len=1048576 rkey=0x00001234 gid=0000:0000:0000:0000:0000:ffff:0a0a:0001 pmtu=1024 max_payload=4096
//! fpga  qpn=0x000012 lkey=0x00005678 gid=0000:0000:0000:0000:0000:ffff:0a0a:0002
//! ready
//! done  frames=100000 bytes=25600000 errors=0
//! ```
//!
//! `host` and `ready` go from the host to the FPGA (`--host-params`), `fpga`
//! and `done` back (`--fpga-params`). `ready` says the host QP is in RTS
//! with every receive posted (a real FPGA's stream is enabled by a register
//! write after that point); `done` gives the FPGA's totals so the host can
//! check its counters exactly. Numbers are decimal or `0x` hex. A channel is
//! a file (the writer truncates it when it starts, then appends one line per
//! message; the reader waits for it to appear and follows it like `tail -f`),
//! a FIFO (each end opens it once, the writer's open waits for the reader,
//! and the writer's close ends the channel) or `-` for stdin/stdout. Blank lines and `#` comments are skipped.
//!
//! Every malformed line is a [`HandoffError`] naming the message, the field
//! and the rule.

use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rctb_core::roce::HostParams;
use rctb_core::transport::{Gid, MAX_24BIT, Mtu, Psn, Qpn};
use thiserror::Error;

/// Why a hand-off failed.
#[derive(Debug, Error)]
pub enum HandoffError {
    /// A line with no word at all reached the parser (a reader skips blank
    /// lines itself, so this comes from [`Message::parse`] called directly).
    #[error("line {line}: empty message")]
    Empty {
        /// The message's line number (see [`HandoffIn`] for how lines count).
        line: usize,
    },
    /// The first word is not `host`, `fpga`, `ready` or `done`.
    #[error("line {line}: unknown message {kind:?} (expected host, fpga, ready or done)")]
    UnknownMessage {
        /// The message's line number.
        line: usize,
        /// The first word as given.
        kind: String,
    },
    /// A word after the message kind has no `=`.
    #[error("line {line}: {kind}: {token:?} is not key=value")]
    Syntax {
        /// The message's line number.
        line: usize,
        /// The message kind (`host`, `fpga`, `ready`, `done`).
        kind: &'static str,
        /// The offending word.
        token: String,
    },
    /// A key this kind of message does not have.
    #[error("line {line}: {kind}.{field}: unknown field (fields: {known})")]
    UnknownField {
        /// The message's line number.
        line: usize,
        /// The message kind.
        kind: &'static str,
        /// The unknown key as given.
        field: String,
        /// The keys this kind takes, comma-separated (`none` for `ready`).
        known: &'static str,
    },
    /// The same key appears twice in one message.
    #[error("line {line}: {kind}.{field}: given twice")]
    Duplicate {
        /// The message's line number.
        line: usize,
        /// The message kind.
        kind: &'static str,
        /// The repeated key.
        field: String,
    },
    /// A key the message kind requires is absent (every field is required).
    #[error("line {line}: {kind}.{field}: missing")]
    Missing {
        /// The message's line number.
        line: usize,
        /// The message kind.
        kind: &'static str,
        /// The first missing key, in the order the message is parsed.
        field: &'static str,
    },
    /// A value that is not a number (decimal or `0x` hex) in the field's
    /// range, not a path MTU, or not a GID in its text form.
    #[error("line {line}: {kind}.{field} = {value:?}: {rule}")]
    BadValue {
        /// The message's line number.
        line: usize,
        /// The message kind.
        kind: &'static str,
        /// The key whose value was refused.
        field: &'static str,
        /// The value as given.
        value: String,
        /// What the value must be, e.g. `must fit 24 bits (0..=0xffffff)`.
        rule: &'static str,
    },
    /// A well-formed message of another kind than the one awaited.
    #[error("line {line}: expected a {expected} message, got {got}")]
    Unexpected {
        /// The message's line number.
        line: usize,
        /// The kind awaited.
        expected: &'static str,
        /// The kind that came.
        got: &'static str,
    },
    /// The channel ended (end of file on stdin or a reader, every writer of
    /// a FIFO closed it) before the awaited message.
    #[error("{from}: closed before the {expected} message")]
    Closed {
        /// The channel's name: its path, or `stdin`.
        from: String,
        /// The kind awaited.
        expected: &'static str,
    },
    /// No line arrived within the timeout given to [`HandoffIn::expect`].
    #[error("{from}: no {expected} message within {secs} s")]
    Timeout {
        /// The channel's name: its path, or `stdin`.
        from: String,
        /// The kind awaited.
        expected: &'static str,
        /// The timeout in whole seconds (rounded down).
        secs: u64,
    },
    /// Opening, reading or writing the channel failed.
    #[error("{path}: {source}")]
    Io {
        /// The channel's name: its path, `stdin` or `stdout`, or the name
        /// given to [`HandoffOut::new`] / [`HandoffIn::from_reader`].
        path: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

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

/// Where a side reads or writes its hand-off: a file, or `-` (stdin/stdout).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `-`: stdout for the writer, stdin for the reader.
    Stdio,
    /// A path: a regular file, or a FIFO if one exists there when the
    /// channel is opened.
    File(PathBuf),
}

impl Channel {
    /// `-` is [`Channel::Stdio`], anything else a path; this never fails
    /// (opening the path may).
    pub fn parse(arg: &str) -> Channel {
        if arg == "-" { Channel::Stdio } else { Channel::File(PathBuf::from(arg)) }
    }
    fn name(&self, stdio: &str) -> String {
        match self {
            Channel::Stdio => stdio.to_string(),
            Channel::File(p) => p.display().to_string(),
        }
    }
}

/// The writing end: one line per message, flushed at once.
pub struct HandoffOut {
    name: String,
    sink: Box<dyn Write + Send>,
}

impl fmt::Debug for HandoffOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoffOut").field("name", &self.name).finish_non_exhaustive()
    }
}

impl HandoffOut {
    /// Opens `ch` for writing; a file is created or truncated now.
    pub fn open(ch: &Channel) -> Result<HandoffOut, HandoffError> {
        let name = ch.name("stdout");
        let sink: Box<dyn Write + Send> = match ch {
            Channel::Stdio => Box::new(io::stdout()),
            Channel::File(p) if is_fifo(p) => {
                // Opened once (this waits for the reader, as the shell's
                // `>fifo` does): the reader takes the last writer's close
                // for the end.
                let io = |source| HandoffError::Io { path: name.clone(), source };
                Box::new(std::fs::OpenOptions::new().write(true).open(p).map_err(io)?)
            }
            Channel::File(p) => {
                // Truncate what an earlier run left, then only ever append.
                let io = |source| HandoffError::Io { path: name.clone(), source };
                File::create(p).map_err(io)?;
                Box::new(std::fs::OpenOptions::new().append(true).open(p).map_err(io)?)
            }
        };
        Ok(HandoffOut { name, sink })
    }

    /// Any writer (tests, in-process hand-offs).
    pub fn new(name: impl Into<String>, sink: Box<dyn Write + Send>) -> HandoffOut {
        HandoffOut { name: name.into(), sink }
    }

    /// Writes `m` as one line and flushes it; a failed write or flush is
    /// [`HandoffError::Io`] (e.g. a broken pipe once the reader is gone).
    pub fn send(&mut self, m: &Message) -> Result<(), HandoffError> {
        let line = format!("{m}\n");
        self.sink
            .write_all(line.as_bytes())
            .and_then(|()| self.sink.flush())
            .map_err(|source| HandoffError::Io { path: self.name.clone(), source })
    }
}

enum Event {
    Line(String),
    Eof,
    Err(io::Error),
}

/// The reading end. A FIFO, stdin or any reader is read by a thread that
/// blocks on it and hands complete lines over, so the caller can wait with
/// a timeout or poll without blocking. A file is read in the caller, only
/// when it asks ([`expect`](HandoffIn::expect) looks again every 10 ms until
/// its timeout, [`poll`](HandoffIn::poll) once): nothing wakes up while the
/// caller streams, which a busy-polling receiver pinned to one CPU would pay
/// for in preemptions. The line numbers in its errors count the messages
/// read so far; blank lines and `#` comments are skipped and not counted.
pub struct HandoffIn {
    name: String,
    feed: Feed,
    line: usize,
    closed: bool,
}

enum Feed {
    Thread(mpsc::Receiver<Event>),
    File(Tail),
}

/// How often `expect` looks at a followed file again.
const FOLLOW_POLL: Duration = Duration::from_millis(10);

impl fmt::Debug for HandoffIn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandoffIn").field("name", &self.name).field("line", &self.line).finish_non_exhaustive()
    }
}

impl HandoffIn {
    /// Starts following `ch`: a file that does not exist yet is waited for,
    /// a FIFO is opened once (waiting for a writer) and read to its end.
    /// Never fails here; an error opening or reading the channel comes back
    /// from the next [`expect`](HandoffIn::expect) or
    /// [`poll`](HandoffIn::poll) as [`HandoffError::Io`].
    pub fn open(ch: &Channel) -> HandoffIn {
        let name = ch.name("stdin");
        let feed = match ch.clone() {
            Channel::Stdio => Feed::Thread(reader_thread(io::stdin())),
            Channel::File(p) if is_fifo(&p) => Feed::Thread(fifo_thread(p)),
            Channel::File(p) => Feed::File(Tail { path: p, file: None, pending: Vec::new() }),
        };
        HandoffIn { name, feed, line: 0, closed: false }
    }

    /// Any reader, read to its end (tests, in-process hand-offs).
    pub fn from_reader(name: impl Into<String>, r: impl Read + Send + 'static) -> HandoffIn {
        HandoffIn { name: name.into(), feed: Feed::Thread(reader_thread(r)), line: 0, closed: false }
    }

    fn take(&mut self, ev: Event, expected: &'static str) -> Result<Message, HandoffError> {
        match ev {
            Event::Line(text) => {
                self.line += 1;
                Message::parse(&text, self.line)
            }
            Event::Eof => {
                self.closed = true;
                Err(HandoffError::Closed { from: self.name.clone(), expected })
            }
            Event::Err(source) => {
                // (As the reading thread ends on an error: nothing follows.)
                self.closed = true;
                Err(HandoffError::Io { path: self.name.clone(), source })
            }
        }
    }

    /// The next event if there is one now; `Eof` once a thread's channel
    /// is gone. A file that turned out to be a FIFO gets its thread here.
    fn next_now(&mut self) -> Option<Event> {
        if let Feed::File(t) = &mut self.feed {
            match t.next() {
                TailNext::Event(ev) => return Some(ev),
                TailNext::Nothing => return None,
                TailNext::Fifo => self.feed = Feed::Thread(fifo_thread(t.path.clone())),
            }
        }
        match &self.feed {
            Feed::Thread(rx) => match rx.try_recv() {
                Ok(ev) => Some(ev),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => Some(Event::Eof),
            },
            Feed::File(_) => None,
        }
    }

    /// The next event within `timeout`, `None` when it passed.
    #[allow(clippy::disallowed_methods)] // a hand-off between processes waits on the real clock
    fn next_within(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        // A file is looked at every FOLLOW_POLL; a thread's channel is
        // waited on. A path that turns out to be a FIFO gets its thread,
        // and the rest of the wait is on that.
        loop {
            let tail = match &mut self.feed {
                Feed::Thread(rx) => {
                    return match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                        Ok(ev) => Some(ev),
                        Err(mpsc::RecvTimeoutError::Timeout) => None,
                        Err(mpsc::RecvTimeoutError::Disconnected) => Some(Event::Eof),
                    };
                }
                Feed::File(tail) => tail,
            };
            match tail.next() {
                TailNext::Event(ev) => return Some(ev),
                TailNext::Fifo => self.feed = Feed::Thread(fifo_thread(tail.path.clone())),
                TailNext::Nothing => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    std::thread::sleep(left.min(FOLLOW_POLL));
                }
            }
        }
    }

    /// The next message, which must be of kind `expected`; waits up to `timeout`.
    pub fn expect(&mut self, expected: &'static str, timeout: Duration) -> Result<Message, HandoffError> {
        if self.closed {
            return Err(HandoffError::Closed { from: self.name.clone(), expected });
        }
        let ev = self.next_within(timeout).ok_or_else(|| HandoffError::Timeout {
            from: self.name.clone(),
            expected,
            secs: timeout.as_secs(),
        })?;
        let m = self.take(ev, expected)?;
        if m.kind() != expected {
            return Err(HandoffError::Unexpected { line: self.line, expected, got: m.kind() });
        }
        Ok(m)
    }

    /// A message if one is there now (`None` also once the channel closed).
    pub fn poll(&mut self, expected: &'static str) -> Result<Option<Message>, HandoffError> {
        if self.closed {
            return Ok(None);
        }
        match self.next_now() {
            None => Ok(None),
            Some(Event::Eof) => {
                self.closed = true;
                Ok(None)
            }
            Some(ev) => {
                let m = self.take(ev, expected)?;
                if m.kind() != expected {
                    return Err(HandoffError::Unexpected { line: self.line, expected, got: m.kind() });
                }
                Ok(Some(m))
            }
        }
    }
}

/// A thread reading `r` to its end, its lines on the returned channel.
fn reader_thread(r: impl Read + Send + 'static) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || forward(BufReader::new(r), &tx));
    rx
}

/// A thread opening the FIFO at `path` (which waits for a writer) and
/// reading it to its end; the thread ends with the process if no writer
/// ever comes.
fn fifo_thread(path: PathBuf) -> mpsc::Receiver<Event> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || match File::open(&path) {
        Ok(f) => forward(BufReader::new(f), &tx),
        Err(e) => {
            let _ = tx.send(Event::Err(e));
        }
    });
    rx
}

/// A file followed like `tail -F`, read only when the reader asks: it may
/// not exist yet, and its last line may not be complete yet.
struct Tail {
    path: PathBuf,
    file: Option<File>,
    pending: Vec<u8>,
}

enum TailNext {
    Event(Event),
    Nothing,
    /// The path is a FIFO: it needs a thread (opening it blocks).
    Fifo,
}

impl Tail {
    fn next(&mut self) -> TailNext {
        let mut buf = [0u8; 4096];
        loop {
            while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=i).collect();
                let text = String::from_utf8_lossy(&line).trim_end_matches(['\n', '\r']).to_string();
                if !skipped(&text) {
                    return TailNext::Event(Event::Line(text));
                }
            }
            let file = match &mut self.file {
                Some(f) => f,
                None => match std::fs::metadata(&self.path) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return TailNext::Nothing,
                    Err(e) => return TailNext::Event(Event::Err(e)),
                    Ok(m) if m.file_type().is_fifo() => return TailNext::Fifo,
                    Ok(_) => match File::open(&self.path) {
                        Ok(f) => self.file.insert(f),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => return TailNext::Nothing,
                        Err(e) => return TailNext::Event(Event::Err(e)),
                    },
                },
            };
            match file.read(&mut buf) {
                Ok(0) => return TailNext::Nothing,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return TailNext::Event(Event::Err(e)),
            }
        }
    }
}

/// Blank lines and `#` comments carry no message.
fn skipped(line: &str) -> bool {
    let t = line.trim();
    t.is_empty() || t.starts_with('#')
}

fn forward(mut r: impl BufRead, tx: &mpsc::Sender<Event>) {
    let mut line = String::new();
    loop {
        line.clear();
        let ev = match r.read_line(&mut line) {
            Ok(0) => Event::Eof,
            Ok(_) if skipped(&line) => continue,
            Ok(_) => Event::Line(line.trim_end_matches(['\n', '\r']).to_string()),
            Err(e) => Event::Err(e),
        };
        let last = !matches!(ev, Event::Line(_));
        if tx.send(ev).is_err() || last {
            return;
        }
    }
}

fn is_fifo(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const HOST: &str = "host qpn=0x000011 rq_psn=0x3a1b2c sq_psn=0x0c0ffe mr_addr=0x7f2a00000000 mr_len=1048576 \
        rkey=0x00001234 gid=0000:0000:0000:0000:0000:ffff:0a0a:0001 pmtu=1024 max_payload=4096";

    fn host() -> HostMsg {
        let Ok(Message::Host(h)) = Message::parse(HOST, 1) else { panic!("HOST parses") };
        h
    }

    #[test]
    fn every_message_round_trips_through_its_line() {
        let h = host();
        assert_eq!(h.params.qpn, 0x11);
        assert_eq!(h.params.rq_psn.get(), 0x3a1b2c);
        assert_eq!(h.params.mr_len, 1 << 20);
        assert_eq!(h.gid.to_ipv4(), Some("10.10.0.1".parse().unwrap()));
        assert_eq!(h.pmtu, Mtu::Mtu1024);
        let all = [
            Message::Host(h),
            Message::Fpga(FpgaMsg { qpn: 0xFFFFFF, lkey: u32::MAX, gid: Gid::from_ipv4("10.10.0.2".parse().unwrap()) }),
            Message::Ready,
            Message::Done(DoneMsg { frames: 100_000, bytes: 1 << 40, errors: 0 }),
        ];
        for m in all {
            assert_eq!(Message::parse(&m.to_string(), 1).unwrap(), m, "{m}");
        }
        assert_eq!(Message::Host(h).to_string(), HOST.split_whitespace().collect::<Vec<_>>().join(" "));
    }

    fn err(line: &str) -> String {
        Message::parse(line, 3).unwrap_err().to_string()
    }

    #[test]
    fn malformed_lines_name_the_message_the_field_and_the_rule() {
        assert_eq!(err("   "), "line 3: empty message");
        assert_eq!(err("hello x=1"), "line 3: unknown message \"hello\" (expected host, fpga, ready or done)");
        assert_eq!(err("fpga qpn"), "line 3: fpga: \"qpn\" is not key=value");
        assert_eq!(
            err("fpga qpn=1 lkey=2 gid=x color=3"),
            "line 3: fpga.color: unknown field (fields: qpn, lkey, gid)"
        );
        assert_eq!(err("done frames=1 frames=2"), "line 3: done.frames: given twice");
        assert_eq!(err("fpga qpn=1 gid=0000:0000:0000:0000:0000:ffff:0a0a:0001"), "line 3: fpga.lkey: missing");
        assert_eq!(
            err(&HOST.replace("qpn=0x000011", "qpn=0x1000000")),
            "line 3: host.qpn = \"0x1000000\": must fit 24 bits (0..=0xffffff)"
        );
        assert_eq!(
            err(&HOST.replace("mr_len=1048576", "mr_len=0")),
            "line 3: host.mr_len = \"0\": must be 1..=2^32-1 (the engine's length is 32 bits)"
        );
        assert_eq!(
            err(&HOST.replace("mr_len=1048576", "mr_len=4294967296")),
            "line 3: host.mr_len = \"4294967296\": must be 1..=2^32-1 (the engine's length is 32 bits)"
        );
        assert_eq!(
            err(&HOST.replace("pmtu=1024", "pmtu=1500")),
            "line 3: host.pmtu = \"1500\": must be 256, 512, 1024, 2048 or 4096"
        );
        assert_eq!(
            err(&HOST.replace("rkey=0x00001234", "rkey=0x1_0000")),
            "line 3: host.rkey = \"0x1_0000\": must fit 32 bits"
        );
        assert_eq!(
            err(&HOST.replace("gid=0000:0000:0000:0000:0000:ffff:0a0a:0001", "gid=::ffff:10.10.0.1")),
            "line 3: host.gid = \"::ffff:10.10.0.1\": must be 8 groups of 4 hex digits joined by ':'"
        );
        assert_eq!(err("fpga qpn=1 lkey=-1 gid=0"), "line 3: fpga.lkey = \"-1\": must fit 32 bits");
    }

    #[test]
    fn a_reader_skips_comments_and_wants_the_expected_kind() {
        let text = "# from roce-rx\n\nready\nhost qpn=1\n";
        let mut r = HandoffIn::from_reader("test", std::io::Cursor::new(text));
        let t = Duration::from_secs(5);
        assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
        let e = r.expect("host", t).unwrap_err();
        assert!(matches!(e, HandoffError::Missing { line: 2, kind: "host", field: "rq_psn" }), "{e}");
        let e = r.expect("fpga", t).unwrap_err();
        assert_eq!(e.to_string(), "test: closed before the fpga message");
        let mut r = HandoffIn::from_reader("test", std::io::Cursor::new("ready\n"));
        let e = r.expect("fpga", t).unwrap_err();
        assert_eq!(e.to_string(), "line 1: expected a fpga message, got ready");
    }

    #[test]
    fn a_file_is_followed_from_before_it_exists_until_its_lines_are_complete() {
        let path = std::env::temp_dir().join(format!("rctb-handoff-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
        assert_eq!(r.poll("ready").unwrap(), None, "no file yet");
        let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
        // A line in two writes: the reader must wait for its end.
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"fpga qpn=0x12 lkey=7 ").unwrap();
        f.flush().unwrap();
        let e = r.expect("fpga", Duration::from_millis(100)).unwrap_err();
        assert!(matches!(e, HandoffError::Timeout { expected: "fpga", .. }), "{e}");
        f.write_all(b"gid=0000:0000:0000:0000:0000:ffff:0a0a:0002\n").unwrap();
        let m = r.expect("fpga", Duration::from_secs(5)).unwrap();
        assert!(matches!(m, Message::Fpga(FpgaMsg { qpn: 0x12, lkey: 7, .. })), "{m:?}");
        w.send(&Message::Done(DoneMsg { frames: 1, bytes: 2, errors: 0 })).unwrap();
        let m = r.expect("done", Duration::from_secs(5)).unwrap();
        assert_eq!(m, Message::Done(DoneMsg { frames: 1, bytes: 2, errors: 0 }));
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_path_that_becomes_a_fifo_after_the_reader_opened_is_read_as_one() {
        let path = std::env::temp_dir().join(format!("rctb-handoff-late-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
        assert_eq!(r.poll("ready").unwrap(), None, "nothing there yet");
        let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
        // The reader finds a FIFO at its next look and opens it in a thread
        // (opening blocks until this writer comes).
        assert_eq!(r.poll("ready").unwrap(), None, "no writer yet");
        let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
        w.send(&Message::Ready).unwrap();
        drop(w);
        let t = Duration::from_secs(5);
        assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
        let e = r.expect("done", t).unwrap_err();
        assert!(matches!(e, HandoffError::Closed { expected: "done", .. }), "{e}");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_fifo_carries_the_messages_and_its_writers_close_ends_the_channel() {
        let path = std::env::temp_dir().join(format!("rctb-handoff-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let made = std::process::Command::new("mkfifo").arg(&path).status().expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
        // The reader opens it in its thread; the writer's open waits for it.
        let mut r = HandoffIn::open(&Channel::parse(path.to_str().unwrap()));
        let mut w = HandoffOut::open(&Channel::File(path.clone())).unwrap();
        w.send(&Message::Ready).unwrap();
        w.send(&Message::Done(DoneMsg { frames: 3, bytes: 4, errors: 0 })).unwrap();
        let t = Duration::from_secs(5);
        assert_eq!(r.expect("ready", t).unwrap(), Message::Ready);
        drop(w);
        assert_eq!(r.expect("done", t).unwrap(), Message::Done(DoneMsg { frames: 3, bytes: 4, errors: 0 }));
        // Every writer closed it: the channel is closed, not silent.
        let e = r.expect("fpga", t).unwrap_err();
        assert!(matches!(e, HandoffError::Closed { expected: "fpga", .. }), "{e}");
        let _ = std::fs::remove_file(&path);
    }
}

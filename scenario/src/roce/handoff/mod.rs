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

mod channel;
mod message;
#[cfg(test)]
mod tests;

pub use channel::{Channel, HandoffIn, HandoffOut};
pub use message::*;

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

//! rctb: the testbench. It reads scenario files, runs them on the
//! deterministic simulator, checks their expectations, and sweeps seeds.
//!
//! - [`scenario`]: the TOML format, parsing and validation.
//! - [`traffic`]: the verbs-level traffic generator, generic over
//!   [`rctb_core::Transport`] with a non-blocking step.
//! - [`runner`]: builds a simulated fabric and drives every stream on it;
//!   [`udp_run`]: the same streams between real UDP endpoints.
//! - [`expect`], [`report`]: checks and the text/JSON report.
//! - [`sweep`]: many seeds in parallel, with replay commands.
//! - [`conformance`]: RC semantics cases, written once for every backend.
//! - [`wiretrace`]: captures reduced to per-connection header sequences.
//! - [`decode`]: a pcap's frames decoded one by one (`rctb decode`).
//! - [`roce`]: the hand-off between `rctb roce-rx` and `rctb fpga-emu`,
//!   and the server + FPGA model pair scenario streams run.
//!
//! The binary (`src/main.rs`) is a thin CLI over these.

mod capture;
mod engine;

pub use capture::{decode, wiretrace};
pub use engine::{
    counters, expect, nvme_stream, pattern, report, runner, scenario, session_stream, sweep, traffic, udp_run,
};

#[doc(hidden)]
pub mod cli;
pub mod conformance;
#[doc(hidden)]
pub mod fuzzing;
pub mod roce;
pub mod session_selftest;
pub mod udp_faults;

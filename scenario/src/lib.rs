//! rctb-scenario: the testbench's library. It reads scenario files, runs
//! them on the deterministic simulator (or real UDP endpoints), checks
//! their expectations and sweeps seeds. The `rctb` binary (crate `rctb`)
//! is its command line; the Python package uses it directly.
//!
//! ```
//! // A scenario from TOML, run on the simulator from seed 1, checked.
//! let text = r#"
//!     name = "two-nodes"
//!     [fabric]
//!     latency = "2us"
//!     [[fabric.nodes]]
//!     name = "a"
//!     ip = "10.0.0.1"
//!     [[fabric.nodes]]
//!     name = "b"
//!     ip = "10.0.0.2"
//!     [[streams]]
//!     name = "ping"
//!     op = "send"
//!     from = "a"
//!     to = "b"
//!     count = 10
//!     size = 64
//!     [streams.expect]
//!     delivered = 10
//! "#;
//! let scenario = rctb_scenario::scenario::Scenario::from_toml(text, "doc").unwrap();
//! let out = rctb_scenario::runner::run(&scenario, 1, false).unwrap();
//! assert!(out.report.passed, "{}", out.report.to_text());
//! // Bad input is a typed error naming the field and the rule.
//! let e = rctb_scenario::scenario::Scenario::from_toml(&text.replace("count = 10", "count = 0"), "doc").unwrap_err();
//! assert!(e.to_string().contains("count"), "{e}");
//! ```
//!
//! Module map, by room:
//!
//! The scenario engine (`src/engine/`, each module re-exported here):
//! - [`scenario`]: the TOML format, parsing and validation.
//! - [`traffic`]: the verbs-level traffic generator, generic over
//!   [`rctb_core::Transport`] with a non-blocking step.
//! - [`nvme_stream`]: `op = "nvme"` streams (the NVMe-oF initiator).
//! - [`session_stream`]: `op = "rcsession"` streams (the session workload).
//! - [`pattern`]: seeded message content (sizes, bytes, immediates).
//! - [`runner`]: builds a simulated fabric and drives every stream on any
//!   [`runner::Fabric`].
//! - [`udp_run`]: the same streams between real UDP endpoints (its
//!   `UdpFabric`).
//! - [`expect`]: the `[expect]` checks of a finished run.
//! - [`counters`]: the fabric counters as named values.
//! - [`report`]: the text/JSON report.
//! - [`sweep`]: many seeds in parallel, with replay commands.
//!
//! The capture tools (`src/capture/`, each module re-exported here):
//! - [`decode`]: a pcap's frames decoded one by one (`rctb decode`).
//! - [`wiretrace`]: captures reduced to per-connection header sequences.
//!
//! Workloads and suites the engine and the front ends share:
//! - [`roce`]: the RoCEv2 receive server's checks, the `roce-rx` /
//!   `fpga-emu` hand-off, and the server + FPGA model pair.
//! - [`session_selftest`]: the RC session selftest (server and client in
//!   one process, on any transport).
//! - [`fault_cases`]: targeted RC fault cases (PSN gap, duplicates, lost
//!   ACK), written once.
//! - [`sim_faults`]: runs them on the simulator's packet rules.
//! - [`udp_faults`]: runs them on a UDP endpoint's path hook (`rctb
//!   conformance --backend udp` adds them to the suite of crate
//!   [`rctb_conformance`]).
//!
//! `fuzzing` (doc-hidden, feature `fuzzing`) holds what the fuzz targets
//! call.

#![warn(missing_docs)]

mod capture;
mod engine;

pub use capture::{decode, wiretrace};
pub use engine::{
    counters, expect, nvme_stream, pattern, report, runner, scenario, session_stream, sweep, traffic, udp_run,
};

pub mod fault_cases;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod roce;
pub mod session_selftest;
pub mod sim_faults;
pub mod udp_faults;

// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

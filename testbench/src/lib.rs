//! rctb: the testbench. It reads scenario files, runs them on the
//! deterministic simulator, checks their expectations, and sweeps seeds.
//!
//! - [`scenario`]: the TOML format, parsing and validation.
//! - [`traffic`]: the verbs-level traffic generator, generic over
//!   [`rctb_core::Transport`] with a non-blocking step.
//! - [`runner`]: builds a simulated fabric and drives every stream on any
//!   [`runner::Fabric`]; [`udp_run`]: the same streams between real UDP
//!   endpoints (its `UdpFabric`).
//! - [`expect`], [`report`]: checks and the text/JSON report.
//! - [`sweep`]: many seeds in parallel, with replay commands.
//! - `rctb conformance` runs the RC conformance suite of crate
//!   [`rctb_conformance`] (written once for every backend); [`udp_faults`]
//!   adds the cases that need a UDP endpoint's path hook.
//! - [`fault_cases`]: targeted RC fault cases (PSN gap, duplicates, lost
//!   ACK), written once; [`sim_faults`] runs them on the simulator's packet
//!   rules, [`udp_faults`] on a UDP endpoint's path hook.
//! - [`wiretrace`]: captures reduced to per-connection header sequences.
//! - [`decode`]: a pcap's frames decoded one by one (`rctb decode`).
//! - [`roce`]: `rctb roce-rx` / `rctb fpga-emu`, the hand-off between them,
//!   and the server + FPGA model pair scenario streams run.
//!
//! The binary (`src/main.rs`) is a thin CLI over these.

pub mod backends;
pub mod counters;
pub mod decode;
pub mod expect;
pub mod fault_cases;
#[doc(hidden)]
pub mod fuzzing;
pub mod nvme;
pub mod nvme_stream;
pub mod pattern;
pub mod report;
pub mod roce;
pub mod runner;
pub mod scenario;
pub mod session_selftest;
pub mod session_stream;
pub mod sim_faults;
pub mod sweep;
pub mod traffic;
pub mod udp_faults;
pub mod udp_run;
pub mod wiretrace;

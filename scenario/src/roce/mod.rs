//! The RoCEv2 receive server's test side, shared by the scenario engine and
//! the `roce-rx` / `fpga-emu` front ends (the `rctb` binary's `cli::roce`):
//!
//! - [`handoff`]: the text hand-off between `rctb roce-rx` (host) and
//!   `rctb fpga-emu` (FPGA engine), in place of register writes.
//! - [`check`]: what the receiving side verifies (ring positions, PRBS
//!   payloads) and counts per channel.
//! - [`pair`]: server and engine model driven together without blocking
//!   (scenario streams with `op = "roce"`, `--backend sim`).

pub mod check;
pub mod handoff;
pub mod pair;

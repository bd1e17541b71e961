//! `rctb roce-rx` and `rctb fpga-emu`, the RoCEv2 receive server's front
//! ends (the checks, hand-off and pair they share with the scenario engine
//! are `rctb_scenario::roce`):
//!
//! - [`args`]: the commands' arguments, validation and the simulator backend;
//!   [`front`]: the front ends on a real transport, generic; [`verbs`]:
//!   on an RDMA device (through [`crate::cli::backend`]); [`udp`]: on a UDP endpoint.

pub mod args;
pub mod front;
pub mod udp;
pub mod verbs;

use std::process::ExitCode;

use args::{CliError, FpgaEmuArgs, RoceBackend, RoceRxArgs};

fn exit(r: Result<bool, CliError>, cmd: &str) -> ExitCode {
    match r {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("rctb {cmd}: {e}");
            ExitCode::from(2)
        }
    }
}

fn print_sim(r: Result<(Vec<String>, bool), CliError>) -> Result<bool, CliError> {
    let (lines, ok) = r?;
    for l in lines {
        println!("{l}");
    }
    Ok(ok)
}

/// `rctb roce-rx`: exit 0 when every frame arrived intact (and as many as
/// expected), 1 when not, 2 when it could not run.
pub fn roce_rx(a: &RoceRxArgs) -> ExitCode {
    let r = match a.backend {
        RoceBackend::Sim => print_sim(args::roce_rx_sim(a)),
        RoceBackend::Verbs => verbs::roce_rx(a),
        RoceBackend::Udp => udp::roce_rx(a),
    };
    exit(r, "roce-rx")
}

/// `rctb fpga-emu`: exit 0 when every frame was sent and acknowledged.
pub fn fpga_emu(a: &FpgaEmuArgs) -> ExitCode {
    let r = match a.backend {
        RoceBackend::Sim => print_sim(args::fpga_emu_sim(a)),
        RoceBackend::Verbs => verbs::fpga_emu(a),
        RoceBackend::Udp => udp::fpga_emu(a),
    };
    exit(r, "fpga-emu")
}

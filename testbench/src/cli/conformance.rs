//! `rctb conformance --backend sim|verbs`: the RC conformance suite
//! ([`rctb_conformance`]) between two ends, one PASS/FAIL line per case
//! and a closing count (`--backend udp` is [`crate::cli::udp`]). Exit
//! status: 0 when every case passed, 1 when one failed, 2 when the ends
//! could not be opened or no case matched the filter.

use std::process::ExitCode;

use rctb_core::Transport;
use rctb_core::transport::Mtu;
use rctb_sim::Sim;

use crate::cli::backend;

/// Runs the suite and prints a line per case and the closing count.
pub fn report<T: Transport>(a: &mut T, b: &mut T, filter: &str) -> ExitCode {
    let results = rctb_conformance::run(a, b, filter, &mut |r| println!("{}", r.line()));
    let failed = results.iter().filter(|r| !r.passed()).count();
    println!("conformance: {} passed, {} failed", results.len() - failed, failed);
    if results.is_empty() {
        eprintln!("rctb: no conformance case matches {filter:?}");
        return ExitCode::from(2);
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// Between two simulated nodes: the requester `sim1` (10.10.0.2), the
/// responder `sim0` (10.10.0.1), MTU 1024, seed 1.
pub fn sim(filter: &str) -> ExitCode {
    let sim = Sim::new(1);
    let nodes = [("sim1", [10, 10, 0, 2]), ("sim0", [10, 10, 0, 1])]
        .map(|(name, ip)| backend::sim_node(&sim, name, ip.into(), Mtu::Mtu1024));
    let [Ok(a), Ok(b)] = nodes else {
        eprintln!("rctb: building the simulated pair failed");
        return ExitCode::from(2);
    };
    report(&mut sim.transport(a), &mut sim.transport(b), filter)
}

/// Between two RDMA devices: `device` requests, `peer` responds.
pub fn verbs(device: Option<&str>, peer: Option<&str>, filter: &str) -> ExitCode {
    let verbs = match backend::verbs() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rctb: {e}");
            return ExitCode::from(2);
        }
    };
    let (Some(device), Some(peer)) = (device, peer) else {
        eprintln!("rctb: --backend verbs needs --device (requester) and --peer (responder), e.g. rxe1 rxe0");
        return ExitCode::from(2);
    };
    let open = |name: &str| {
        verbs.open(name).map_err(|e| {
            eprintln!("rctb: {e}");
            ExitCode::from(2)
        })
    };
    let (mut a, mut b) = match (open(device), open(peer)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    report(&mut a, &mut b, filter)
}

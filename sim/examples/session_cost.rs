//! Instructions per RC session for `ci/session-cost`: runs N whole sessions
//! (PREPARE to reaped, both ends and the simulated fabric) inside
//! [`run`], which callgrind measures alone (`--toggle-collect`). Two runs
//! at different N give the per-session cost with set-up cancelled.
//!
//! `cargo run --release -p rctb-sim --example session_cost -- get 4096 1000`

use std::process::ExitCode;

use rctb_core::wire::hipobj::Op;
use rctb_models::rcsession::SessionPair;
use rctb_sim::{NodeConfig, Sim, SimError, SimTransport};

#[inline(never)]
fn run(pair: &mut SessionPair<SimTransport>, op: Op, object: &[u8], n: u64) -> Result<(), String> {
    for _ in 0..n {
        pair.transfer(op, std::hint::black_box(object))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: session_cost get|put SIZE N";
    let (op, size, n) = match args.as_slice() {
        [op, size, n] => {
            let op = match op.as_str() {
                "get" => Op::Get,
                "put" => Op::Put,
                _ => {
                    eprintln!("{usage}");
                    return ExitCode::from(2);
                }
            };
            match (size.parse::<usize>(), n.parse::<u64>()) {
                (Ok(s), Ok(n)) if s > 0 => (op, s, n),
                _ => {
                    eprintln!("{usage}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    let object: Vec<u8> = (0..size).map(|i| (i * 31 + 7) as u8).collect();
    let mut pair = match new_pair(1, size as u64) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("session_cost: {e}");
            return ExitCode::from(1);
        }
    };
    // one session outside the measured part: first-use allocations
    if let Err(e) = pair.transfer(op, &object).and_then(|()| run(&mut pair, op, &object, n)) {
        eprintln!("session_cost: {e}");
        return ExitCode::from(1);
    }
    println!("{} sessions", pair.sessions());
    ExitCode::SUCCESS
}

/// The pair on a fresh fabric: server 10.0.0.1, client 10.0.0.2.
fn new_pair(seed: u64, capacity: u64) -> Result<SessionPair<SimTransport>, String> {
    let sim = Sim::new(seed);
    let node = |name: &str, ip: [u8; 4]| -> Result<_, SimError> {
        sim.add_node(NodeConfig::new(name, std::net::Ipv4Addr::from(ip)))
    };
    let (s, c) = match (node("server", [10, 0, 0, 1]), node("client", [10, 0, 0, 2])) {
        (Ok(s), Ok(c)) => (s, c),
        (Err(e), _) | (_, Err(e)) => return Err(e.to_string()),
    };
    SessionPair::new(seed, capacity, sim.transport(s), sim.transport(c))
}

//! The NVMe-oF initiator (rctb_core::nvmeof) against the simulator's target
//! model (rctb_models::nvme), end to end over the simulated RC fabric.
//!
//! This file holds the rig the tests share (a host and a target on a fresh
//! fabric); `io.rs` the commands and their errors, `faults.rs` lost and
//! delayed responses, keep-alive, crashes and reconnection, random faults,
//! and `durability.rs` what a flush makes durable and a crash loses.

use std::cell::RefCell;
use std::net::SocketAddrV4;
use std::rc::Rc;

use rctb_core::nvmeof::protocol::*;
use rctb_core::nvmeof::{Controller, ControllerConfig};
use rctb_models::nvme::{NvmeTarget, TargetConfig};
use rctb_sim::{NodeConfig, Sim, SimTransport};

mod durability;
mod faults;
mod io;

const NQN: &str = "nqn.2026-01.io.rctb:sim-target";

struct Setup {
    sim: Sim,
    host: SimTransport,
    target: Rc<RefCell<NvmeTarget>>,
    addr: SocketAddrV4,
}

fn setup(seed: u64, cfg: TargetConfig) -> Setup {
    let sim = Sim::new(seed);
    let h = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
    let tn = sim.add_node(NodeConfig::new("target", "10.0.0.2".parse().unwrap())).unwrap();
    let target = Rc::new(RefCell::new(NvmeTarget::new(cfg, "10.0.0.2".parse().unwrap()).unwrap()));
    let actor = target.clone();
    sim.add_actor(tn, Box::new(move |t: &mut SimTransport| actor.borrow_mut().run(t)));
    let addr = SocketAddrV4::new("10.0.0.2".parse().unwrap(), NVME_RDMA_PORT);
    Setup { host: sim.transport(h), sim, target, addr }
}

fn config(addr: SocketAddrV4) -> ControllerConfig {
    ControllerConfig::new(addr, Nqn::new(NQN).unwrap(), [0x11; 16])
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 9) as u8).collect()
}

fn connect(s: &Setup, cfg: ControllerConfig) -> Controller<SimTransport> {
    Controller::connect(s.host.clone(), cfg).map_err(|e| e.into_error()).expect("connect")
}

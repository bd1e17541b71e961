//! rctb-models: models of the peers the applications talk to, devices and
//! programs with their own RDMA engine, each written against
//! [`rctb_core::Transport`] so the same model runs on every backend (a
//! simulator node, a UDP endpoint, a verbs device).
//!
//! - [`fpga`]: the FPGA's RoCEv2 engine (surf `RoCEv2Engine`) behind its
//!   register file, the host-side set-up sequence, and frame streaming
//!   (`rctb fpga-emu` runs it on real verbs; scenarios on the simulator).
//! - [`nvme`]: an NVMe-oF/RDMA target (nvmet-rdma as the host sees it) with
//!   in-memory namespaces and faults.
//! - [`rcsession`]: a session workload (one RC session server, many
//!   clients drawn from a seed) and a one-session-at-a-time pair.
//!
//! ```
//! // The NVMe-oF target model on a simulated node, rctb's initiator on another.
//! use rctb_core::nvmeof::protocol::Nqn;
//! use rctb_core::nvmeof::{Controller, ControllerConfig};
//! use rctb_models::nvme::{NvmeTarget, TargetConfig};
//! use rctb_sim::{NodeConfig, Sim, SimTransport};
//!
//! let sim = Sim::new(1);
//! let host = sim.add_node(NodeConfig::new("host", "10.0.0.1".parse().unwrap())).unwrap();
//! let node = sim.add_node(NodeConfig::new("target", "10.0.0.2".parse().unwrap())).unwrap();
//! let nqn = "nqn.2026-01.io.rctb:doc";
//! let mut target = NvmeTarget::new(TargetConfig::new(nqn), "10.0.0.2".parse().unwrap()).unwrap();
//! target.faults_mut().response_delay = rctb_core::time::Duration::from_millis(5); // a slow target
//! sim.add_actor(node, Box::new(move |t: &mut SimTransport| target.run(t)));
//! let cfg = ControllerConfig::new("10.0.0.2:4420".parse().unwrap(), Nqn::new(nqn).unwrap(), [7; 16]);
//! let mut c = Controller::connect(sim.transport(host), cfg).map_err(|e| e.into_error()).unwrap();
//! assert_eq!(c.active_namespaces().unwrap(), vec![1, 2]);
//! ```
//!
//! # Contract
//!
//! - **Nothing here blocks on its own.** Each model has a non-blocking step
//!   that handles what is pending on its transport and says when it next
//!   needs to run: [`fpga::FpgaEngine::pump`], [`nvme::NvmeTarget::run`],
//!   [`rcsession::SessionWorkload::step`] with
//!   [`rcsession::SessionWorkload::next_wake`]. The owner calls it whenever
//!   something may have happened and at the latest at the instant it
//!   returned. The blocking conveniences (`setup_connection`,
//!   `SessionPair::transfer`, `SessionWorkload::run`) are thin loops over
//!   the transport's `wait` or a [`rcsession::Fabric`].
//! - **No simulator inside.** The models know no backend: on the simulator
//!   a closure over a shared handle makes a model an actor
//!   (`sim.add_actor(node, Box::new(move |t: &mut SimTransport| target.borrow_mut().run(t)))`),
//!   so it answers while an application on the same thread blocks in
//!   `wait`. The tests here run the models on the simulator
//!   (`rctb-sim` is a dev-dependency only).
//! - **Time and randomness come in.** Every clock read is the transport's
//!   `now()`; every draw comes from a seed the caller gives, by a generator
//!   derived from it and a label ([`SeededRng`]: the convention is
//!   `rctb_core::transport::seed`'s).
//! - **Errors.** Configuration is checked when a model is built (a typed
//!   error naming the field and the rule). A peer's protocol errors are
//!   answered on the wire as the real device answers them; a local failure
//!   (a verb refused) is a typed error of the step (`EngineError`,
//!   `SetupError`), kept in `NvmeTarget::last_error`, or counted in the
//!   workload's stats. Nothing panics on a peer's input.

#![warn(missing_docs)]

pub mod fpga;
pub mod nvme;
pub mod rcsession;
mod rng;

pub use rng::SeededRng;

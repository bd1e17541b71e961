//! rctb-conformance: the RC conformance suite, RC semantics checked the
//! same way on every backend.
//!
//! ```
//! // Every case between two simulated nodes, as `cargo test` runs them.
//! use rctb_sim::{NodeConfig, Sim};
//!
//! let sim = Sim::new(1);
//! let a = sim.add_node(NodeConfig::new("a", "10.0.0.1".parse().unwrap())).unwrap();
//! let b = sim.add_node(NodeConfig::new("b", "10.0.0.2".parse().unwrap())).unwrap();
//! let results = rctb_conformance::run(&mut sim.transport(a), &mut sim.transport(b), "cm/", &mut |r| {
//!     println!("{} {}", if r.passed() { "PASS" } else { "FAIL" }, r.name);
//! });
//! assert!(results.len() >= 3 && results.iter().all(|r| r.passed()));
//! ```
//!
//! # Contract
//!
//! - **What a case is.** Each case is written once, generic over
//!   [`Transport`], and runs between two endpoints: `a` (the requester) and
//!   `b` (the responder). [`cases`] lists them in the order they run; their
//!   names (`send/mtu`, `read/1mib`, `rnr/retry_exhausted`, `cm/reject_private_data`, ...) are stable: filters,
//!   reports and the VM harness select by them.
//! - **Call order.** Build two transports that can reach each other, then
//!   [`run`] (a name filter) or [`run_selected`] (a predicate). Each case gets
//!   fresh [`Endpoints`] (a PD and a CQ per side), runs, and releases
//!   everything it made, so one failure cannot leak into the next case;
//!   `report` is called as each case finishes, and the results come back in
//!   order.
//! - **What blocks.** Only the transports' `wait`: every wait is bounded by a
//!   deadline on the transport's clock (virtual on the simulator, real on
//!   hardware, at most [`WAIT_LIMIT`]), so a case never hangs.
//! - **What a failure means.** A case fails with the first thing that
//!   differs from RC semantics as verbs specifies them and rxe implements
//!   them ([`CaseResult::failure`]); `setup:` means the endpoints could not
//!   be built (no IPv4-mapped RoCE v2 GID, say), `cleanup:` that the case
//!   passed but could not release what it made. Nothing panics.
//!
//! Where rxe and the simulator disagree, rxe is right: the simulator gets
//! fixed and a case pins the behaviour.
//!
//! # Who runs it
//!
//! - the simulator's `cargo test` (`sim/tests/conformance.rs`: two nodes of
//!   one fabric);
//! - the udp backend's `cargo test` (`udp/tests/conformance.rs`: two
//!   endpoints on loopback, the `cm/` cases through RDMA CM MADs on QP1);
//! - the hardware tests where a device is named (`hw/tests/conformance.rs`,
//!   feature `verbs`, `RCTB_RDMA_DEVICE` and `RCTB_RDMA_PEER_DEVICE`);
//! - `rctb conformance --backend sim|udp|verbs`, one `PASS`/`FAIL` line per
//!   case ([`CaseResult::line`]).
//!
//! The helpers the cases stand on ([`run_case`], [`Endpoints`], [`Link`],
//! [`completions`], [`expect_wc`], [`pattern`], [`pause`]) are public so
//! that backend-specific cases (the udp path-fault cases, say) are written
//! and run the same way.

#![warn(missing_docs)]

mod atomic_cases;
mod cases;
mod harness;
mod srq_cases;

use rctb_core::Transport;

pub use harness::{
    Endpoints, Link, QP_ACCESS_ALL, QpPair, Side, WAIT_LIMIT, async_event, cm_event, completions, expect_wc, pattern,
    pause,
};

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    /// The case's name, `group/case`.
    pub name: String,
    /// `None` when it passed; the reason otherwise.
    pub failure: Option<String>,
}

impl CaseResult {
    /// Whether the case passed.
    pub fn passed(&self) -> bool {
        self.failure.is_none()
    }

    /// The harness line: `PASS name` or `FAIL name why`.
    pub fn line(&self) -> String {
        match &self.failure {
            None => format!("PASS {}", self.name),
            Some(why) => format!("FAIL {} {}", self.name, why.replace('\n', " ")),
        }
    }
}

/// A case's body: `Err` carries why it failed.
pub type CaseFn<T> = fn(&mut Endpoints<'_, T>) -> Result<(), String>;

/// Every case, in the order they run.
pub fn cases<T: Transport>() -> Vec<(String, CaseFn<T>)> {
    cases::all()
}

/// Runs every case whose name contains `filter` (all with `""`), calling
/// `report` as each finishes.
pub fn run<T: Transport>(a: &mut T, b: &mut T, filter: &str, report: &mut dyn FnMut(&CaseResult)) -> Vec<CaseResult> {
    run_selected(a, b, &|name| name.contains(filter), report)
}

/// Runs every case `select` accepts (by name), calling `report` as each
/// finishes.
pub fn run_selected<T: Transport>(
    a: &mut T,
    b: &mut T,
    select: &dyn Fn(&str) -> bool,
    report: &mut dyn FnMut(&CaseResult),
) -> Vec<CaseResult> {
    let mut results = Vec::new();
    for (name, case) in cases::<T>() {
        if !select(&name) {
            continue;
        }
        let result = run_case(a, b, name, case);
        report(&result);
        results.push(result);
    }
    results
}

/// Runs one case body between `a` and `b` the way the suite runs each of
/// its own: fresh [`Endpoints`], the body, then their release. For cases
/// written outside this crate (a backend's fault cases) with these helpers.
pub fn run_case<T: Transport>(
    a: &mut T,
    b: &mut T,
    name: String,
    case: impl FnOnce(&mut Endpoints<'_, T>) -> Result<(), String>,
) -> CaseResult {
    let failure = match Endpoints::new(a, b) {
        Ok(mut ends) => {
            let outcome = case(&mut ends);
            let cleanup = ends.release();
            match (outcome, cleanup) {
                (Ok(()), Ok(())) => None,
                (Err(why), _) => Some(why),
                (Ok(()), Err(why)) => Some(format!("cleanup: {why}")),
            }
        }
        Err(why) => Some(format!("setup: {why}")),
    };
    CaseResult { name, failure }
}

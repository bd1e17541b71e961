//! The conformance suite: RC semantics checked the same way on every
//! backend.
//!
//! Each case is written once, generic over [`Transport`], and runs between
//! two endpoints: `a` (the requester) and `b` (the responder). On the
//! simulator they are two nodes of one fabric (`cargo test`); on verbs they
//! are two devices, e.g. rxe1 and rxe0 in the VM harness (`rctb conformance
//! --backend verbs`). Every case builds its own PD, CQ, regions and QPs,
//! checks what it is about, and releases everything, so one failure cannot
//! leak into the next case. Waits are bounded by deadlines on the
//! transport's clock (virtual on the simulator, real on hardware): a case
//! never hangs.
//!
//! Where rxe and the simulator disagree, rxe is right: the simulator gets
//! fixed and a case pins the behaviour.

mod cases;
mod harness;

use rctb_core::Transport;

pub use harness::{Endpoints, Link, QpPair, Side, completions, expect_wc, pattern, pause};

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseResult {
    pub name: String,
    /// `None` when it passed; the reason otherwise.
    pub failure: Option<String>,
}

impl CaseResult {
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
        let result = CaseResult { name, failure };
        report(&result);
        results.push(result);
    }
    results
}

//! `rctb.run_scenario` and `rctb.sweep`: the testbench's scenario runner
//! and seed sweep, returning the report exactly as `rctb run --json`
//! prints it (the testbench's own report code), for Python to parse.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use rctb_scenario::scenario::Scenario;
use rctb_scenario::{runner, sweep};

fn load(path: &str) -> PyResult<Scenario> {
    if !std::path::Path::new(path).is_file() {
        return Err(PyOSError::new_err(format!("scenario {path:?}: no such file")));
    }
    Scenario::load(path).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Runs the scenario at `path` on the simulator with `seed` (the file's
/// default seed when `None`); returns `rctb run --json`'s text.
#[pyfunction]
#[pyo3(signature = (path, seed = None))]
pub fn run_scenario_json(py: Python<'_>, path: String, seed: Option<u64>) -> PyResult<String> {
    py.detach(move || {
        let scenario = load(&path)?;
        let seed = seed.unwrap_or(scenario.default_seed);
        let out = std::panic::catch_unwind(|| runner::run(&scenario, seed, false))
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("internal error in rctb's runner (a bug)"))?
            .map_err(|e| PyValueError::new_err(format!("{path}: building the fabric failed: {e}")))?;
        Ok(out.report.to_json())
    })
}

/// (seed, passed, failures, replay command) of one seed of a sweep.
type SeedRow = (u64, bool, Vec<String>, String);

/// Runs seeds `start..start + seeds` of the scenario on `jobs` threads;
/// returns a list of (seed, passed, failures, replay command).
#[pyfunction]
#[pyo3(signature = (path, seeds, *, start = 0, jobs = None))]
pub fn sweep_json(py: Python<'_>, path: String, seeds: u64, start: u64, jobs: Option<usize>) -> PyResult<Vec<SeedRow>> {
    if seeds == 0 {
        return Err(PyValueError::new_err("seeds must be at least 1"));
    }
    if seeds > 1_000_000 {
        return Err(PyValueError::new_err(format!("seeds {seeds}: at most 1000000 per call")));
    }
    if jobs == Some(0) {
        return Err(PyValueError::new_err("jobs must be at least 1"));
    }
    py.detach(move || {
        let scenario = load(&path)?;
        let list = sweep::shard_seeds(start, seeds, sweep::Shard::WHOLE);
        let jobs = jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let results = std::panic::catch_unwind(|| sweep::run_seeds(&scenario, &list, jobs, &|_| {}))
            .map_err(|_| pyo3::exceptions::PyRuntimeError::new_err("internal error in rctb's sweep (a bug)"))?;
        Ok(results
            .into_iter()
            .map(|r| {
                let replay = sweep::replay_command(&path, r.seed);
                (r.seed, r.passed, r.failures, replay)
            })
            .collect())
    })
}

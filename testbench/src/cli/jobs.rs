//! Threads that each run their own initiator, pinned to CPUs, started
//! together: `rctb nvme bench --jobs N --cpu LIST`, as fio's `numjobs`
//! with `cpus_allowed_policy=split`, SPDK's one reactor per core, or the
//! kernel host's I/O queue per CPU.
//!
//! Each job builds everything it uses (transport, controller, buffers) on
//! its own thread, so nothing is shared but a start gate: every job waits
//! at [`Job::start`] until all are ready, and when one failed before that,
//! the others learn it there instead of waiting for ever.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The CPUs the calling thread may run on, as the kernel has them.
pub fn allowed_cpus() -> nix::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0))?;
    Ok((0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect())
}

/// CPUs as a space-separated list, e.g. `0 1`.
pub fn cpu_list(cpus: &[usize]) -> String {
    cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(" ")
}

/// Why a pin failed: `Usage` for a CPU the process may not use (the
/// message names `--cpu` and lists the CPUs allowed), `Os` for a system
/// call that failed.
#[derive(Debug)]
pub enum PinError {
    Usage(String),
    Os(String),
}

/// Restricts the calling thread to `cpus` (`--cpu LIST`; empty: leaves
/// it as it is). Every CPU must be one this process may run on.
pub fn pin(cpus: &[usize]) -> Result<(), PinError> {
    if cpus.is_empty() {
        return Ok(());
    }
    let named = cpus.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
    let allowed = allowed_cpus().map_err(|e| PinError::Os(format!("--cpu {named}: sched_getaffinity: {e}")))?;
    let mut only = CpuSet::new();
    for &cpu in cpus {
        if !allowed.contains(&cpu) {
            return Err(PinError::Usage(format!(
                "--cpu {named}: {cpu} is not a CPU this process may run on (allowed: {})",
                cpu_list(&allowed)
            )));
        }
        only.set(cpu).map_err(|e| PinError::Usage(format!("--cpu {named}: {cpu}: {e}")))?;
    }
    sched_setaffinity(Pid::from_raw(0), &only)
        .map_err(|e| PinError::Os(format!("--cpu {named}: sched_setaffinity: {e}")))
}

/// After `--cpu`: ", pinned to CPU N" (or "CPUs N M"), read back from the
/// kernel's affinity mask of the calling thread, so it says what took
/// effect; nothing when `asked` is false.
pub fn pinned(asked: bool) -> String {
    match (asked, allowed_cpus()) {
        (false, _) | (_, Err(_)) => String::new(),
        (true, Ok(now)) if now.len() == 1 => format!(", pinned to CPU {}", now[0]),
        (true, Ok(now)) => format!(", pinned to CPUs {}", cpu_list(&now)),
    }
}

/// `total` split over `jobs` as evenly as it goes, the first ones taking
/// the remainder: 10 over 3 is 4, 3, 3.
pub fn share(total: u64, jobs: usize, index: usize) -> u64 {
    let jobs = jobs as u64;
    total / jobs + u64::from((index as u64) < total % jobs)
}

/// The gate the jobs of one run start through.
#[derive(Debug)]
struct Gate {
    barrier: Barrier,
    broken: AtomicBool,
}

/// One job of a run: which one it is, and its way through the start gate.
#[derive(Debug)]
pub struct Job<'a> {
    /// 0-based.
    pub index: usize,
    /// Jobs in the run.
    pub count: usize,
    gate: Option<&'a Gate>,
    waited: bool,
}

impl Job<'_> {
    /// A run of one job: nothing to wait for.
    pub fn single() -> Job<'static> {
        Job { index: 0, count: 1, gate: None, waited: false }
    }

    /// Waits until every job of the run is ready to start; false when one
    /// of them failed before it got here (then this one should stop).
    /// Call it once, when ready: a job that returns without calling it is
    /// taken as failed.
    pub fn start(&mut self) -> bool {
        self.waited = true;
        match self.gate {
            Some(g) => {
                g.barrier.wait();
                !g.broken.load(Ordering::SeqCst)
            }
            None => true,
        }
    }
}

impl Drop for Job<'_> {
    /// A job that ends (returns early or unwinds) without having started
    /// still passes the gate, marked failed, so the others are not left
    /// waiting for it.
    fn drop(&mut self) {
        if let (false, Some(g)) = (self.waited, self.gate) {
            g.broken.store(true, Ordering::SeqCst);
            g.barrier.wait();
        }
    }
}

/// Runs `count` jobs of `f`, each on its own thread, job i pinned to CPU
/// `cpus[i % cpus.len()]` when `cpus` is not empty; one job runs on the
/// calling thread, as it is. Returns each job's result in job order; a job
/// whose pin failed returns `pin_failed` of the error without running.
pub fn run<R, E, F>(count: usize, cpus: &[usize], pin_failed: impl Fn(PinError) -> E + Sync, f: F) -> Vec<Result<R, E>>
where
    R: Send,
    E: Send,
    F: Fn(&mut Job<'_>) -> Result<R, E> + Sync,
{
    if count <= 1 {
        return vec![f(&mut Job::single())];
    }
    let gate = Gate { barrier: Barrier::new(count), broken: AtomicBool::new(false) };
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..count)
            .map(|index| {
                let (gate, f, pin_failed) = (&gate, &f, &pin_failed);
                s.spawn(move || {
                    let mut job = Job { index, count, gate: Some(gate), waited: false };
                    if !cpus.is_empty() {
                        pin(&cpus[index % cpus.len()..][..1]).map_err(pin_failed)?;
                    }
                    f(&mut job)
                })
            })
            .collect();
        // A job's panic is re-raised here, after its Drop let the others go.
        handles.into_iter().map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_and_differ_by_at_most_one() {
        for (total, jobs) in [(10, 3), (32, 2), (7, 7), (100, 1), (5, 4)] {
            let parts: Vec<u64> = (0..jobs).map(|i| share(total, jobs, i)).collect();
            assert_eq!(parts.iter().sum::<u64>(), total, "{total} over {jobs}: {parts:?}");
            assert!(parts.windows(2).all(|w| w[0] >= w[1] && w[0] - w[1] <= 1), "{parts:?}");
        }
        assert_eq!((0..3).map(|i| share(10, 3, i)).collect::<Vec<_>>(), [4, 3, 3]);
    }

    #[test]
    fn every_job_runs_and_results_come_back_in_job_order() {
        let r =
            run(4, &[], |e| format!("{e:?}"), |job| if job.start() { Ok(job.index * 10) } else { Err("gate".into()) });
        assert_eq!(r, vec![Ok(0), Ok(10), Ok(20), Ok(30)]);
    }

    #[test]
    fn a_job_failing_before_the_gate_stops_the_others_there() {
        // Job 2 fails while "connecting"; the others were ready and must
        // learn it at the gate, not hang (the test would not end) nor run.
        let r: Vec<Result<&str, String>> = run(
            3,
            &[],
            |e| format!("{e:?}"),
            |job| {
                if job.index == 2 {
                    return Err("job 2: connect failed".into());
                }
                if job.start() { Ok("ran") } else { Err(format!("job {}: stopped at the gate", job.index)) }
            },
        );
        assert_eq!(
            r,
            vec![
                Err("job 0: stopped at the gate".into()),
                Err("job 1: stopped at the gate".into()),
                Err("job 2: connect failed".into())
            ]
        );
    }

    #[test]
    fn jobs_run_on_the_cpus_they_are_given() {
        let cpus = allowed_cpus().expect("sched_getaffinity");
        let picked = [cpus[0], *cpus.last().unwrap()];
        let r: Vec<Result<Vec<usize>, String>> = run(
            4,
            &picked,
            |e| format!("{e:?}"),
            |job| {
                job.start();
                allowed_cpus().map_err(|e| e.to_string())
            },
        );
        for (i, on) in r.into_iter().enumerate() {
            assert_eq!(on.unwrap(), vec![picked[i % 2]], "job {i}");
        }
    }

    #[test]
    fn a_cpu_not_allowed_is_a_usage_error_naming_it() {
        match pin(&[0, 100_000]) {
            Err(PinError::Usage(m)) => {
                assert!(m.starts_with("--cpu 0,100000: 100000 is not a CPU this process may run on (allowed: 0"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
}

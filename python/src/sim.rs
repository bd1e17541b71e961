//! `rctb.sim.Fabric`: a deterministic simulated fabric built from Python
//! (seed, nodes, links and their faults, the NVMe-oF target model with its
//! namespaces and timed faults), with virtual time exposed.
//!
//! The fabric and everything on it live on the fabric's engine thread
//! ([`crate::engine`]); this module owns the fabric's state there and the
//! Python classes that reach it. Controllers and servers created on the
//! fabric share its engine, so one seed decides the whole run.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::Mtu;
use rctb_models::nvme::{NamespaceConfig, NvmeTarget, SubsystemConfig, TargetConfig};
use rctb_sim::{Actor, FaultAction, LinkConfig, NodeConfig, ScheduledFault, Sim, SimTransport};

use crate::engine::{Engine, State};
use crate::errors::{engine_err, invalid};

/// The id of the fabric's own state in its engine.
pub const FABRIC_ID: u64 = 1;

/// A target model's timed faults, shared with its actor.
pub type Schedule = Rc<RefCell<Vec<(Instant, TargetFault)>>>;

/// The fabric as its engine thread holds it.
pub struct FabricState {
    pub sim: Sim,
    /// Every node's name and address.
    pub nodes: Vec<(String, Ipv4Addr)>,
    pub targets: Vec<(String, Rc<RefCell<NvmeTarget>>, Schedule)>,
}

impl FabricState {
    /// The transport of the node named `source` or with address `source`
    /// (the node "host" when `None`).
    pub fn transport_of(&self, source: Option<&str>) -> Result<SimTransport, String> {
        let name = source.unwrap_or("host");
        let found = match name.parse::<Ipv4Addr>() {
            Ok(ip) => self.nodes.iter().find(|(_, a)| *a == ip),
            Err(_) => self.nodes.iter().find(|(n, _)| n == name),
        };
        let (n, _) = found.ok_or_else(|| match source {
            None => {
                "source: the fabric has no node named \"host\"; add one (fabric.add_node(\"host\", ip)) or pass source="
                    .to_string()
            }
            Some(s) => format!("source {s:?}: no node of the fabric has this name or address"),
        })?;
        let id = self.sim.node(n).map_err(|e| e.to_string())?;
        Ok(self.sim.transport(id))
    }
}

/// A fault of the target model at a point in virtual time.
#[derive(Clone, Copy, Debug)]
pub enum TargetFault {
    Crash,
    Restart,
    DropResponses(u32),
    ResponseDelay(Duration),
}

/// The target model behind a schedule of its own faults.
struct TimedTarget {
    target: Rc<RefCell<NvmeTarget>>,
    schedule: Schedule,
}

impl Actor for TimedTarget {
    fn run(&mut self, t: &mut SimTransport) -> Option<Instant> {
        use rctb_core::Transport;
        let now = t.now();
        let due: Vec<TargetFault> = {
            let mut s = self.schedule.borrow_mut();
            let due = s.iter().filter(|(at, _)| *at <= now).map(|(_, f)| *f).collect();
            s.retain(|(at, _)| *at > now);
            due
        };
        let mut target = self.target.borrow_mut();
        for f in due {
            match f {
                TargetFault::Crash => target.crash(t),
                TargetFault::Restart => target.restart(t),
                TargetFault::DropResponses(n) => target.faults_mut().drop_responses = n,
                TargetFault::ResponseDelay(d) => target.faults_mut().response_delay = d,
            }
        }
        let wake = target.run(t);
        let next_fault = self.schedule.borrow().iter().map(|(at, _)| *at).min();
        match (wake, next_fault) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

fn parse_ip(field: &str, s: &str) -> PyResult<Ipv4Addr> {
    s.parse().map_err(|_| invalid(format!("{field} {s:?}: not an IPv4 address (a.b.c.d)")))
}

fn mtu_of(bytes: u32) -> PyResult<Mtu> {
    Mtu::ALL
        .into_iter()
        .find(|m| m.bytes() == bytes)
        .ok_or_else(|| invalid(format!("mtu {bytes}: must be one of 256, 512, 1024, 2048, 4096")))
}

fn ns_of(seconds: f64, field: &str) -> PyResult<Duration> {
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(invalid(format!("{field} {seconds}: must be a finite number of seconds >= 0")));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| invalid(format!("{field} {seconds}: too large")))
}

/// A simulated RoCEv2 fabric: one seed decides everything.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct Fabric {
    pub engine: Arc<Engine>,
    seed: u64,
}

impl Fabric {
    pub fn seed_value(&self) -> u64 {
        self.seed
    }

    pub fn with_state<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut FabricState) -> Result<R, String> + Send + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        py.detach(move || {
            engine.call(move |s: &mut State| match s.get_mut::<FabricState>(FABRIC_ID) {
                Some(f_state) => f(f_state),
                None => Err("the fabric is gone".into()),
            })
        })
        .map_err(engine_err)?
        .map_err(invalid)
    }
}

#[pymethods]
impl Fabric {
    #[new]
    #[pyo3(signature = (seed = 0))]
    fn new(py: Python<'_>, seed: u64) -> PyResult<Self> {
        let engine = Arc::new(Engine::start("sim").map_err(|e| invalid(format!("starting the engine: {e}")))?);
        let e2 = engine.clone();
        py.detach(move || {
            e2.call(move |s| {
                let id = s.insert(FabricState { sim: Sim::new(seed), nodes: Vec::new(), targets: Vec::new() });
                debug_assert_eq!(id, FABRIC_ID);
            })
        })
        .map_err(engine_err)?;
        Ok(Fabric { engine, seed })
    }

    /// The seed this fabric replays from.
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// Virtual time in nanoseconds since the fabric was built.
    #[getter]
    fn now_ns(&self, py: Python<'_>) -> PyResult<u64> {
        self.with_state(py, |f| Ok(f.sim.now().as_nanos()))
    }

    /// Virtual time in seconds.
    #[getter]
    fn now(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.now_ns(py)? as f64 / 1e9)
    }

    /// Adds a host with one RoCEv2 port; returns its name.
    #[pyo3(signature = (name, ip, *, mtu = 4096, bandwidth_bps = 100_000_000_000))]
    fn add_node(&self, py: Python<'_>, name: String, ip: &str, mtu: u32, bandwidth_bps: u64) -> PyResult<String> {
        let ip = parse_ip("ip", ip)?;
        let mtu = mtu_of(mtu)?;
        if name.is_empty() {
            return Err(invalid("name: must not be empty"));
        }
        self.with_state(py, move |f| {
            let mut cfg = NodeConfig::new(name.clone(), ip);
            cfg.mtu = mtu;
            cfg.bandwidth_bps = bandwidth_bps;
            f.sim.add_node(cfg).map_err(|e| e.to_string())?;
            f.nodes.push((name.clone(), ip));
            Ok(name)
        })
    }

    /// Adds a node running the NVMe-oF/RDMA target model. `namespaces` is
    /// a list of `(nsid, lba_size, blocks)`.
    #[pyo3(signature = (ip, nqn, *, name = "target".to_string(), namespaces = vec![(1, 512, 8192), (2, 4096, 1024)],
        port = 4420, mdts = 5, mqes = 127, maxcmd = 128, in_capsule_bytes = 4096, ready_delay = 0.02, max_io_queues = 4))]
    #[allow(clippy::too_many_arguments)]
    fn add_nvme_target(
        &self,
        py: Python<'_>,
        ip: &str,
        nqn: String,
        name: String,
        namespaces: Vec<(u32, u32, u64)>,
        port: u16,
        mdts: u8,
        mqes: u16,
        maxcmd: u16,
        in_capsule_bytes: u32,
        ready_delay: f64,
        max_io_queues: u16,
    ) -> PyResult<NvmeTargetModel> {
        let ip = parse_ip("ip", ip)?;
        let ready_delay = ns_of(ready_delay, "ready_delay")?;
        if !in_capsule_bytes.is_multiple_of(16) || in_capsule_bytes > 1 << 20 {
            return Err(invalid(format!(
                "in_capsule_bytes {in_capsule_bytes}: must be a multiple of 16, at most 1 MiB"
            )));
        }
        let mut cfg = TargetConfig::new(&nqn);
        cfg.port = port;
        cfg.subsystems = vec![SubsystemConfig {
            nqn: nqn.clone(),
            namespaces: namespaces
                .into_iter()
                .map(|(nsid, lba_size, blocks)| NamespaceConfig { nsid, lba_size, blocks })
                .collect(),
        }];
        cfg.mdts = mdts;
        cfg.mqes = mqes;
        cfg.maxcmd = maxcmd;
        cfg.ioccsz = 4 + in_capsule_bytes / 16;
        cfg.ready_delay = ready_delay;
        cfg.max_io_queues = max_io_queues;
        let node_name = name.clone();
        let index = self.with_state(py, move |f| {
            let target = NvmeTarget::new(cfg, ip).map_err(|e| e.to_string())?;
            let node = f.sim.add_node(NodeConfig::new(node_name.clone(), ip)).map_err(|e| e.to_string())?;
            f.nodes.push((node_name.clone(), ip));
            let target = Rc::new(RefCell::new(target));
            let schedule = Rc::new(RefCell::new(Vec::new()));
            f.sim.add_actor(node, Box::new(TimedTarget { target: target.clone(), schedule: schedule.clone() }));
            f.targets.push((node_name, target, schedule));
            Ok(f.targets.len() - 1)
        })?;
        Ok(NvmeTargetModel { engine: self.engine.clone(), index, nqn, name })
    }

    /// Sets both directions between nodes `a` and `b`: latency and fault
    /// probabilities (drawn from the fabric's seed).
    #[pyo3(signature = (a, b, *, latency = 1e-6, drop = 0.0, duplicate = 0.0, reorder = 0.0, reorder_window = 0.0, corrupt = 0.0, jitter = 0.0))]
    #[allow(clippy::too_many_arguments)]
    fn set_link(
        &self,
        py: Python<'_>,
        a: String,
        b: String,
        latency: f64,
        drop: f64,
        duplicate: f64,
        reorder: f64,
        reorder_window: f64,
        corrupt: f64,
        jitter: f64,
    ) -> PyResult<()> {
        for (field, p) in [("drop", drop), ("duplicate", duplicate), ("reorder", reorder), ("corrupt", corrupt)] {
            if !(0.0..=1.0).contains(&p) {
                return Err(invalid(format!("{field} {p}: a probability must be 0.0..=1.0")));
            }
        }
        let mut cfg = LinkConfig::default();
        cfg.latency = ns_of(latency, "latency")?;
        cfg.faults.drop = drop;
        cfg.faults.duplicate = duplicate;
        cfg.faults.reorder = reorder;
        cfg.faults.reorder_window = ns_of(reorder_window, "reorder_window")?;
        cfg.faults.corrupt = corrupt;
        cfg.faults.jitter = ns_of(jitter, "jitter")?;
        self.with_state(py, move |f| {
            let na = f.sim.node(&a).map_err(|e| e.to_string())?;
            let nb = f.sim.node(&b).map_err(|e| e.to_string())?;
            f.sim.set_link(na, nb, cfg);
            Ok(())
        })
    }

    /// Cuts both directions between `a` and `b`, now or at virtual time `at` (seconds).
    #[pyo3(signature = (a, b, *, at = None))]
    fn partition(&self, py: Python<'_>, a: String, b: String, at: Option<f64>) -> PyResult<()> {
        self.link_action(py, FaultAction::Partition { a, b }, at)
    }

    /// Restores both directions between `a` and `b`, now or at `at`.
    #[pyo3(signature = (a, b, *, at = None))]
    fn heal(&self, py: Python<'_>, a: String, b: String, at: Option<f64>) -> PyResult<()> {
        self.link_action(py, FaultAction::Heal { a, b }, at)
    }

    /// Runs the fabric until virtual time `t` (seconds since start).
    fn run_until(&self, py: Python<'_>, t: f64) -> PyResult<()> {
        let d = ns_of(t, "t")?;
        self.with_state(py, move |f| {
            f.sim.run_until(Instant::from_nanos(d.as_nanos().min(u64::MAX as u128) as u64));
            Ok(())
        })
    }

    /// Counters of the fabric (frames delivered, dropped, ...).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // FabricStats is all u64 counters; its Debug form names each one.
        let text = self.with_state(py, |f| Ok(format!("{:?}", f.sim.stats())))?;
        let d = PyDict::new(py);
        let inner = text.split_once('{').and_then(|(_, r)| r.rsplit_once('}')).map_or("", |(i, _)| i);
        for pair in inner.split(',') {
            if let Some((k, v)) = pair.split_once(':')
                && let Ok(n) = v.trim().parse::<u64>()
            {
                d.set_item(k.trim(), n)?;
            }
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!("Fabric(seed={})", self.seed)
    }

    /// Verbs objects alive on every node (PDs, MRs, CQs, QPs): leak checks.
    fn live_resources<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with_state(py, |f| Ok(f.sim.live_resources()))?;
        let d = PyDict::new(py);
        d.set_item("pds", r.pds)?;
        d.set_item("mrs", r.mrs)?;
        d.set_item("cqs", r.cqs)?;
        d.set_item("qps", r.qps)?;
        Ok(d)
    }

    /// Holds the fabric's engine until the returned gate is released: calls
    /// made meanwhile wait (with the GIL released). For tests of
    /// concurrency; `pending_calls` counts the callers waiting.
    fn pause(&self) -> Gate {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        self.engine.post(move |_| {
            let _ = rx.recv();
        });
        Gate { tx: std::sync::Mutex::new(Some(tx)) }
    }

    /// Calls into this fabric's engine that wait for an answer now.
    #[getter]
    fn pending_calls(&self) -> usize {
        self.engine.pending()
    }
}

impl Fabric {
    fn link_action(&self, py: Python<'_>, action: FaultAction, at: Option<f64>) -> PyResult<()> {
        let at = at.map(|s| ns_of(s, "at")).transpose()?;
        self.with_state(py, move |f| {
            for name in action.nodes() {
                f.sim.node(name).map_err(|e| e.to_string())?;
            }
            match at {
                None => f.sim.apply(action),
                Some(d) => {
                    let at = Instant::from_nanos(d.as_nanos().min(u64::MAX as u128) as u64);
                    f.sim.schedule(ScheduledFault { at, action })
                }
            }
            Ok(())
        })
    }
}

/// A hold on a fabric's engine ([`Fabric::pause`]); released explicitly
/// or when collected.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct Gate {
    tx: std::sync::Mutex<Option<std::sync::mpsc::Sender<()>>>,
}

#[pymethods]
impl Gate {
    fn release(&self) {
        if let Ok(mut g) = self.tx.lock() {
            g.take();
        }
    }
}

/// The NVMe-oF target model on a fabric: its data, counters and faults.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct NvmeTargetModel {
    engine: Arc<Engine>,
    index: usize,
    #[pyo3(get)]
    nqn: String,
    #[pyo3(get)]
    name: String,
}

impl NvmeTargetModel {
    fn with_target<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut NvmeTarget, &mut Vec<(Instant, TargetFault)>, &FabricState) -> Result<R, String>
        + Send
        + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        let index = self.index;
        py.detach(move || {
            engine.call(move |s: &mut State| {
                let state = s.get_mut::<FabricState>(FABRIC_ID).ok_or("the fabric is gone")?;
                let (_, target, schedule) = state.targets.get(index).cloned().ok_or("no such target")?;
                let mut t = target.borrow_mut();
                let mut sch = schedule.borrow_mut();
                f(&mut t, &mut sch, state)
            })
        })
        .map_err(engine_err)?
        .map_err(invalid)
    }

    fn fault(&self, py: Python<'_>, fault: TargetFault, at: Option<f64>) -> PyResult<()> {
        let at = at.map(|s| ns_of(s, "at")).transpose()?;
        let name = self.name.clone();
        self.with_target(py, move |target, schedule, state| {
            let node = state.sim.node(&name).map_err(|e| e.to_string())?;
            let mut t = state.sim.transport(node);
            match at {
                None => match fault {
                    TargetFault::Crash => target.crash(&mut t),
                    TargetFault::Restart => target.restart(&mut t),
                    TargetFault::DropResponses(n) => target.faults_mut().drop_responses = n,
                    TargetFault::ResponseDelay(d) => target.faults_mut().response_delay = d,
                },
                Some(d) => schedule.push((Instant::from_nanos(d.as_nanos().min(u64::MAX as u128) as u64), fault)),
            }
            Ok(())
        })
    }
}

#[pymethods]
impl NvmeTargetModel {
    /// The bytes of namespace `nsid` (a copy).
    fn namespace_data<'py>(&self, py: Python<'py>, nsid: u32) -> PyResult<Bound<'py, pyo3::types::PyBytes>> {
        let nqn = self.nqn.clone();
        let data = self.with_target(py, move |t, _, _| {
            t.namespace_data(&nqn, nsid).map(<[u8]>::to_vec).ok_or_else(|| format!("nsid {nsid}: no such namespace"))
        })?;
        Ok(pyo3::types::PyBytes::new(py, &data))
    }

    /// Writes `data` into namespace `nsid` at byte `offset` (test setup).
    fn write_namespace(&self, py: Python<'_>, nsid: u32, offset: u64, data: Vec<u8>) -> PyResult<()> {
        let nqn = self.nqn.clone();
        self.with_target(py, move |t, _, _| {
            let ns = t.namespace_data_mut(&nqn, nsid).ok_or_else(|| format!("nsid {nsid}: no such namespace"))?;
            let end = offset.checked_add(data.len() as u64).filter(|e| *e <= ns.len() as u64).ok_or_else(|| {
                format!("offset {offset} + {} bytes: beyond the namespace's {} bytes", data.len(), ns.len())
            })?;
            ns[offset as usize..end as usize].copy_from_slice(&data);
            Ok(())
        })
    }

    /// The target's counters.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.with_target(py, |t, _, _| Ok(t.stats()))?;
        let d = PyDict::new(py);
        for (k, v) in [
            ("commands", s.commands),
            ("errors", s.errors),
            ("reads", s.reads),
            ("writes", s.writes),
            ("flushes", s.flushes),
            ("bytes_read", s.bytes_read),
            ("bytes_written", s.bytes_written),
            ("in_capsule_writes", s.in_capsule_writes),
            ("dropped_responses", s.dropped_responses),
            ("keep_alives", s.keep_alives),
            ("crashes", s.crashes),
            ("rejected_connects", s.rejected_connects),
            ("connections", s.connections),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// Crashes the target (connections torn down, unflushed writes lost), now or at `at`.
    #[pyo3(signature = (*, at = None))]
    fn crash(&self, py: Python<'_>, at: Option<f64>) -> PyResult<()> {
        self.fault(py, TargetFault::Crash, at)
    }

    /// Restarts a crashed target, now or at `at`.
    #[pyo3(signature = (*, at = None))]
    fn restart(&self, py: Python<'_>, at: Option<f64>) -> PyResult<()> {
        self.fault(py, TargetFault::Restart, at)
    }

    /// Drops the next `count` responses (the commands still execute).
    #[pyo3(signature = (count, *, at = None))]
    fn drop_responses(&self, py: Python<'_>, count: u32, at: Option<f64>) -> PyResult<()> {
        self.fault(py, TargetFault::DropResponses(count), at)
    }

    /// Delays every response by `delay` seconds of virtual time.
    #[pyo3(signature = (delay, *, at = None))]
    fn set_response_delay(&self, py: Python<'_>, delay: f64, at: Option<f64>) -> PyResult<()> {
        let d = ns_of(delay, "delay")?;
        self.fault(py, TargetFault::ResponseDelay(d), at)
    }
}

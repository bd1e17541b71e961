//! `_rctb.NvmeController`: rctb's NVMe-oF initiator
//! (`rctb_core::nvmeof::Controller`) on a backend chosen at run time, for
//! the `rctb.nvmeof` package to present as the seed's `Controller`.
//!
//! The controller and its registered buffers live on an engine thread (the
//! fabric's for `sim`, one of its own for `verbs`); every call here waits
//! for it with the GIL released. Argument checks the seed's users know
//! (its messages) are made in Python before reaching here; this layer
//! checks again what Rust needs (ranges, ids) so nothing panics.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rctb_core::Transport;
use rctb_core::nvmeof::protocol::Nqn;
use rctb_core::nvmeof::{Buffer, Controller, ControllerConfig, Namespace, NvmeError};
use rctb_core::time::Duration;
use rctb_core::transport::MrInfo;
use rctb_sim::SimTransport;

use crate::engine::{Engine, State};
use crate::errors::{engine_err, invalid, nvme_err};
use crate::sim::{FABRIC_ID, Fabric, FabricState};

/// A controller of any backend (PyO3 classes cannot be generic).
/// Boxed: the variants differ in size, and there is one per Python object.
pub enum AnyController {
    Sim(Box<Controller<SimTransport>>),
    #[cfg(feature = "verbs")]
    Verbs(Box<Controller<rctb_hw::VerbsTransport>>),
}

macro_rules! with_ctrl {
    ($c:expr, $x:ident => $body:expr) => {
        match $c {
            AnyController::Sim($x) => $body,
            #[cfg(feature = "verbs")]
            AnyController::Verbs($x) => $body,
        }
    };
}

/// A controller with its namespaces and buffers, on its engine thread.
pub struct ControllerState {
    ctrl: AnyController,
    namespaces: BTreeMap<u32, Namespace>,
    buffers: BTreeMap<u32, MrInfo>,
    closed: bool,
}

impl ControllerState {
    fn buffer(&self, key: u32) -> Result<MrInfo, NvmeError> {
        self.buffers.get(&key).copied().ok_or(NvmeError::Unsupported(format!("buffer {key} is closed")))
    }

    fn close(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        let buffers = std::mem::take(&mut self.buffers);
        with_ctrl!(&mut self.ctrl, c => {
            for mr in buffers.into_values() {
                let _ = c.free(mr);
            }
            c.close();
        });
    }
}

impl Drop for ControllerState {
    fn drop(&mut self) {
        self.close();
    }
}

fn parse_host(host: &str) -> PyResult<Ipv4Addr> {
    host.parse().map_err(|_| invalid(format!("host {host:?}: rctb connects to an IPv4 address (a.b.c.d)")))
}

/// rctb's initiator, connected.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct NvmeController {
    engine: Arc<Engine>,
    id: u64,
    #[pyo3(get)]
    cntlid: u16,
    #[pyo3(get)]
    max_transfer: u64,
    #[pyo3(get)]
    page_size: u64,
    #[pyo3(get)]
    queue_depth: u16,
    /// CAP as read at bring-up.
    #[pyo3(get)]
    capabilities: u64,
    info: Vec<(&'static str, InfoValue)>,
}

#[derive(Clone)]
enum InfoValue {
    Int(u64),
    Text(String),
}

/// Everything a connect returns to Python.
struct Connected {
    id: u64,
    cntlid: u16,
    max_transfer: u64,
    page_size: u64,
    queue_depth: u16,
    capabilities: u64,
    info: Vec<(&'static str, InfoValue)>,
}

fn connected<T: Transport>(c: &Controller<T>, id: u64) -> Connected {
    let i = c.info();
    let info = vec![
        ("serial", InfoValue::Text(i.serial.clone())),
        ("model", InfoValue::Text(i.model.clone())),
        ("firmware", InfoValue::Text(i.firmware.clone())),
        ("mdts", InfoValue::Int(i.mdts.into())),
        ("controller_id", InfoValue::Int(i.cntlid.into())),
        ("version", InfoValue::Int(i.version.into())),
        ("max_commands", InfoValue::Int(i.maxcmd.into())),
        ("namespace_count", InfoValue::Int(i.nn.into())),
        ("sgls", InfoValue::Int(i.sgls.into())),
        ("ioccsz", InfoValue::Int(i.ioccsz.into())),
        ("iorcsz", InfoValue::Int(i.iorcsz.into())),
        ("icdoff", InfoValue::Int(i.icdoff.into())),
    ];
    Connected {
        id,
        cntlid: c.cntlid(),
        max_transfer: c.max_transfer(),
        page_size: c.cap().page_size(),
        queue_depth: c.io_queues().first().map_or(0, |q| q.depth()),
        capabilities: c.cap().0,
        info,
    }
}

type Job<R> = Box<dyn FnOnce(&mut ControllerState) -> Result<R, NvmeError> + Send>;

impl NvmeController {
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ControllerState) -> Result<R, NvmeError> + Send + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        let id = self.id;
        let f: Job<R> = Box::new(f);
        py.detach(move || {
            engine.call(move |s: &mut State| match s.get_mut::<ControllerState>(id) {
                Some(c) if !c.closed => f(c),
                _ => Err(NvmeError::Unsupported("the controller is closed".into())),
            })
        })
        .map_err(engine_err)?
        .map_err(nvme_err)
    }
}

#[pymethods]
impl NvmeController {
    /// Connects. `backend` is a `Fabric` (the simulator) or `None` for verbs.
    #[new]
    #[pyo3(signature = (backend, host, subsystem_nqn, *, port, host_id, host_nqn, queue_depth, timeout, source = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        backend: Option<&Bound<'_, Fabric>>,
        host: &str,
        subsystem_nqn: String,
        port: u16,
        host_id: [u8; 16],
        host_nqn: String,
        queue_depth: u16,
        timeout: f64,
        source: Option<String>,
    ) -> PyResult<Self> {
        let addr = SocketAddrV4::new(parse_host(host)?, port);
        let subnqn = Nqn::new(subsystem_nqn).map_err(|e| invalid(format!("subsystem_nqn: {e}")))?;
        let hostnqn = Nqn::new(host_nqn).map_err(|e| invalid(format!("host_nqn: {e}")))?;
        if !timeout.is_finite() || timeout <= 0.0 {
            return Err(invalid(format!("timeout {timeout}: must be a positive number of seconds")));
        }
        let timeout =
            Duration::try_from_secs_f64(timeout).map_err(|_| invalid(format!("timeout {timeout}: too large")))?;
        let mut cfg = ControllerConfig::new(addr, subnqn, host_id);
        cfg.hostnqn = hostnqn;
        cfg.queue_depth = queue_depth;
        cfg.timeout = timeout;
        // The seed sends no in-capsule data; keep its wire behaviour.
        cfg.in_capsule_writes = false;
        let (engine, job): ConnectJob = match backend {
            Some(fabric) => {
                let engine = fabric.get().engine.clone();
                let job = Box::new(move |s: &mut State| {
                    let t = s
                        .get::<FabricState>(FABRIC_ID)
                        .ok_or_else(|| "the fabric is gone".to_string())
                        .and_then(|f| f.transport_of(source.as_deref()))
                        .map_err(invalid)?;
                    let c = Controller::connect(t, cfg).map_err(|e| nvme_err(e.into_error()))?;
                    let state = ControllerState {
                        ctrl: AnyController::Sim(Box::new(c)),
                        namespaces: BTreeMap::new(),
                        buffers: BTreeMap::new(),
                        closed: false,
                    };
                    let summary = |st: &ControllerState, id| with_ctrl!(&st.ctrl, c => connected(c, id));
                    let id = s.insert(state);
                    let st = s.get::<ControllerState>(id).expect("just inserted");
                    Ok(summary(st, id))
                });
                (engine, job)
            }
            None => verbs_job(source, cfg)?,
        };
        let e2 = engine.clone();
        let c = py.detach(move || e2.call(job)).map_err(engine_err)??;
        Ok(NvmeController {
            engine,
            id: c.id,
            cntlid: c.cntlid,
            max_transfer: c.max_transfer,
            page_size: c.page_size,
            queue_depth: c.queue_depth,
            capabilities: c.capabilities,
            info: c.info,
        })
    }

    /// The Identify Controller fields the seed's `ControllerInfo` has.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.info {
            match v {
                InfoValue::Int(n) => d.set_item(k, n)?,
                InfoValue::Text(t) => d.set_item(k, t)?,
            }
        }
        Ok(d)
    }

    /// Identifies `nsid`: (size, capacity, used, lba_size, metadata_size).
    fn identify_namespace(&self, py: Python<'_>, nsid: u32) -> PyResult<(u64, u64, u64, u64, u16)> {
        self.call(py, move |s| {
            let ns = with_ctrl!(&mut s.ctrl, c => c.namespace(nsid))?;
            let i = &ns.info;
            let r = (i.nsze, i.ncap, i.nuse, ns.lba_size(), i.metadata_size());
            s.namespaces.insert(nsid, ns);
            Ok(r)
        })
    }

    /// Registers `length` bytes; returns (key, addr, lkey, rkey).
    fn allocate(&self, py: Python<'_>, length: u64) -> PyResult<(u32, u64, u32, u32)> {
        if length == 0 {
            return Err(invalid("length must be positive"));
        }
        self.call(py, move |s| {
            let mr = with_ctrl!(&mut s.ctrl, c => c.alloc(length))?;
            let key = s.buffers.keys().next_back().map_or(1, |k| k + 1);
            s.buffers.insert(key, mr);
            Ok((key, mr.addr, mr.lkey, mr.rkey))
        })
    }

    /// Deregisters buffer `key` (closing twice is harmless).
    fn free_buffer(&self, py: Python<'_>, key: u32) -> PyResult<()> {
        self.call(py, move |s| match s.buffers.remove(&key) {
            Some(mr) => with_ctrl!(&mut s.ctrl, c => c.free(mr)),
            None => Ok(()),
        })
    }

    /// Copies `data` into buffer `key` at `offset`.
    fn buffer_write(&self, py: Python<'_>, key: u32, data: Vec<u8>, offset: u64) -> PyResult<()> {
        self.call(py, move |s| {
            let mr = s.buffer(key)?;
            with_ctrl!(&mut s.ctrl, c => c.transport_mut().mr_write(mr.id, offset, &data)).map_err(NvmeError::from)
        })
    }

    /// Copies `length` bytes of buffer `key` from `offset`.
    fn buffer_read<'py>(&self, py: Python<'py>, key: u32, length: u64, offset: u64) -> PyResult<Bound<'py, PyBytes>> {
        let len = usize::try_from(length).map_err(|_| invalid("length: too large"))?;
        let data = self.call(py, move |s| {
            let mr = s.buffer(key)?;
            if offset.checked_add(length).is_none_or(|e| e > mr.len) {
                return Err(NvmeError::Unsupported(format!(
                    "offset {offset} + length {length} exceeds the buffer's {} bytes",
                    mr.len
                )));
            }
            let mut b = vec![0u8; len];
            with_ctrl!(&s.ctrl, c => c.transport().mr_read(mr.id, offset, &mut b))?;
            Ok(b)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Buffer `key`'s registered memory as a buffer-protocol object,
    /// without a copy (verbs only: the simulator's memory is its engine
    /// thread's, so there `buffer_read` copies).
    fn buffer_view(&self, py: Python<'_>, key: u32) -> PyResult<Py<PyAny>> {
        let view = self.call(py, move |s| {
            #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
            let mr = s.buffer(key)?;
            match &s.ctrl {
                #[cfg(feature = "verbs")]
                AnyController::Verbs(c) => c.transport().mr_export(mr.id, 0, mr.len).map(Some).map_err(NvmeError::from),
                AnyController::Sim(_) => Ok(None),
            }
        })?;
        crate::verbs::view_or_refuse(py, view, false)
    }

    /// Reads `length` bytes (whole blocks) of `nsid` from `slba` into
    /// buffer `key` at `offset` (split at MDTS).
    fn read(&self, py: Python<'_>, nsid: u32, slba: u64, key: u32, offset: u64, length: u64) -> PyResult<()> {
        self.transfer(py, true, nsid, slba, key, offset, length)
    }

    fn write(&self, py: Python<'_>, nsid: u32, slba: u64, key: u32, offset: u64, length: u64) -> PyResult<()> {
        self.transfer(py, false, nsid, slba, key, offset, length)
    }

    fn flush(&self, py: Python<'_>, nsid: u32) -> PyResult<()> {
        self.call(py, move |s| {
            let ns = s
                .namespaces
                .get(&nsid)
                .cloned()
                .ok_or(NvmeError::Unsupported(format!("nsid {nsid} is not identified")))?;
            with_ctrl!(&mut s.ctrl, c => c.flush(&ns))
        })
    }

    /// Virtual (sim) or monotonic (verbs) time of the controller's transport, in ns.
    fn now_ns(&self, py: Python<'_>) -> PyResult<u64> {
        self.call(py, |s| Ok(with_ctrl!(&s.ctrl, c => c.transport().now().as_nanos())))
    }

    /// Closes the queues and frees every buffer; idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| {
                if let Some(mut c) = s.remove::<ControllerState>(id) {
                    c.close();
                }
            })
        })
        .map_err(engine_err)
    }
}

impl NvmeController {
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        py: Python<'_>,
        read: bool,
        nsid: u32,
        slba: u64,
        key: u32,
        offset: u64,
        length: u64,
    ) -> PyResult<()> {
        self.call(py, move |s| {
            let ns = s
                .namespaces
                .get(&nsid)
                .cloned()
                .ok_or(NvmeError::Unsupported(format!("nsid {nsid} is not identified")))?;
            let mr = s.buffer(key)?;
            let buf = Buffer::slice(mr, offset, length);
            with_ctrl!(&mut s.ctrl, c => if read { c.read(&ns, slba, buf) } else { c.write(&ns, slba, buf) })
        })
    }
}

impl Drop for NvmeController {
    fn drop(&mut self) {
        // Freed on the engine thread after the jobs already queued.
        let id = self.id;
        self.engine.post(move |s| {
            if let Some(mut c) = s.remove::<ControllerState>(id) {
                c.close();
            }
        });
    }
}

type ConnectJob = (Arc<Engine>, Box<dyn FnOnce(&mut State) -> PyResult<Connected> + Send>);

#[cfg(feature = "verbs")]
fn verbs_job(source: Option<String>, cfg: ControllerConfig) -> PyResult<ConnectJob> {
    let engine = Arc::new(Engine::start("verbs").map_err(|e| invalid(format!("starting the engine: {e}")))?);
    let job = Box::new(move |s: &mut State| {
        let t = crate::verbs::open_device(source.as_deref())?;
        let c = Controller::connect(t, cfg).map_err(|e| nvme_err(e.into_error()))?;
        let id = s.insert(ControllerState {
            ctrl: AnyController::Verbs(Box::new(c)),
            namespaces: BTreeMap::new(),
            buffers: BTreeMap::new(),
            closed: false,
        });
        let st = s.get::<ControllerState>(id).expect("just inserted");
        Ok(with_ctrl!(&st.ctrl, c => connected(c, id)))
    });
    Ok((engine, job))
}

#[cfg(not(feature = "verbs"))]
fn verbs_job(_source: Option<String>, _cfg: ControllerConfig) -> PyResult<ConnectJob> {
    Err(crate::errors::no_verbs())
}

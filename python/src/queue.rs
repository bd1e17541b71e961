//! `_rctb.NvmeQueue`: one NVMe/RDMA queue (`rctb_core::nvmeof::Queue`) on
//! its own protection domain, for `rctb.nvmeof.rdma.RDMAQueue`: submit a
//! 64-byte capsule, poll, execute with a timeout, and the host buffers
//! its commands point at.
//!
//! The capsule goes out as the caller built it (as the seed's queue posts
//! it), with only the command id (bytes 2..4) set by the queue
//! (`Queue::submit_capsule`): any opcode, every field kept.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rctb_core::Transport;
use rctb_core::nvmeof::{NvmeError, Queue, QueueConfig};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{MrInfo, PdId};
use rctb_sim::SimTransport;
use rctb_udp::mixed::Either;

use crate::engine::{Engine, State};
use crate::errors::{engine_err, invalid, nvme_err};
use crate::sim::{FABRIC_ID, Fabric, FabricState};

/// (result, sq_head, sq_id, command_id, status_field) of a response.
type Cqe = (u64, u16, u16, u16, u16);

/// What a queue runs on: the fabric's transport, or a device's.
#[cfg(feature = "verbs")]
type Hw = rctb_hw::VerbsTransport;
/// Without the verbs feature the second arm is never built (verbs is
/// refused before a queue is made); it only gives the type its shape.
#[cfg(not(feature = "verbs"))]
type Hw = SimTransport;
type QueueTransport = Either<SimTransport, Hw>;

struct QueueState {
    t: QueueTransport,
    pd: PdId,
    q: Queue,
    buffers: BTreeMap<u32, MrInfo>,
    closed: bool,
}

impl QueueState {
    fn close(&mut self) {
        if !self.closed {
            self.closed = true;
            self.q.close(&mut self.t);
            for mr in std::mem::take(&mut self.buffers).into_values() {
                let _ = self.t.dereg_mr(mr.id);
            }
            let _ = self.t.dealloc_pd(self.pd);
        }
    }
}

impl Drop for QueueState {
    fn drop(&mut self) {
        self.close();
    }
}

fn cqe(c: &rctb_core::nvmeof::protocol::Completion) -> Cqe {
    (c.result, c.sq_head, c.sq_id, c.cid, c.status_field)
}

fn err(msg: impl Into<String>) -> NvmeError {
    NvmeError::Unsupported(msg.into())
}

/// One connected NVMe/RDMA queue.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct NvmeQueue {
    engine: Arc<Engine>,
    id: u64,
}

impl NvmeQueue {
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut QueueState) -> Result<R, NvmeError> + Send + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| match s.get_mut::<QueueState>(id) {
                Some(q) if !q.closed => f(q),
                _ => Err(NvmeError::Disconnected { qid: u16::MAX }),
            })
        })
        .map_err(engine_err)?
        .map_err(nvme_err)
    }
}

#[pymethods]
impl NvmeQueue {
    #[new]
    #[pyo3(signature = (backend, host, port, qid, depth, controller_id, source = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        backend: Option<&Bound<'_, Fabric>>,
        host: &str,
        port: u16,
        qid: u16,
        depth: u16,
        controller_id: u16,
        source: Option<String>,
    ) -> PyResult<Self> {
        let ip: Ipv4Addr =
            host.parse().map_err(|_| invalid(format!("host {host:?}: rctb connects to an IPv4 address")))?;
        // The seed times each execute() on its own; the queue's own
        // deadline only bounds the connect.
        let mut cfg = QueueConfig::new(SocketAddrV4::new(ip, port), depth, Duration::from_secs(30));
        cfg.qid = qid;
        cfg.cntlid = controller_id;
        cfg.in_capsule = 0;
        // The fabric's engine thread owns the simulated transports; a
        // verbs queue gets an engine thread of its own, as a verbs
        // Controller does.
        let (engine, open): Opener = match backend {
            Some(fabric) => (
                fabric.get().engine.clone(),
                Box::new(move |s: &mut State| {
                    s.get::<FabricState>(FABRIC_ID)
                        .ok_or_else(|| "the fabric is gone".to_string())
                        .and_then(|f| f.transport_of(source.as_deref()))
                        .map(Either::A)
                        .map_err(invalid)
                }),
            ),
            None => verbs_opener(source)?,
        };
        let e2 = engine.clone();
        let id = py
            .detach(move || {
                e2.call(move |s: &mut State| -> PyResult<u64> {
                    let mut t = open(s)?;
                    let pd = t.alloc_pd().map_err(|e| nvme_err(e.into()))?;
                    match Queue::connect(&mut t, pd, &cfg) {
                        Ok(q) => Ok(s.insert(QueueState { t, pd, q, buffers: BTreeMap::new(), closed: false })),
                        Err(e) => {
                            let _ = t.dealloc_pd(pd);
                            Err(nvme_err(e))
                        }
                    }
                })
            })
            .map_err(engine_err)??;
        Ok(NvmeQueue { engine, id })
    }

    #[getter]
    fn outstanding(&self, py: Python<'_>) -> PyResult<u16> {
        self.call(py, |q| Ok(q.q.outstanding()))
    }

    #[getter]
    fn depth(&self, py: Python<'_>) -> PyResult<u16> {
        self.call(py, |q| Ok(q.q.depth()))
    }

    /// Commands the queue holds at once: `depth - 1`, or fewer when the
    /// target's CM accept (crqsize) asked for less.
    #[getter]
    fn capacity(&self, py: Python<'_>) -> PyResult<u16> {
        self.call(py, |q| Ok(q.q.capacity()))
    }

    /// Submits a 64-byte capsule; returns the command id the queue gave it.
    fn submit(&self, py: Python<'_>, command: &[u8]) -> PyResult<u16> {
        if command.len() != 64 {
            return Err(invalid(format!(
                "command: an NVMe command capsule is exactly 64 bytes (got {})",
                command.len()
            )));
        }
        // Posted as given (the seed posts the caller's bytes), only the
        // command id set by the queue.
        let capsule: [u8; 64] = command.try_into().expect("length checked");
        self.call(py, move |q| q.q.submit_capsule(&mut q.t, &capsule))
    }

    /// Processes completions without blocking; returns the finished
    /// commands as (cid, completion) or (cid, None) when it failed.
    fn poll(&self, py: Python<'_>) -> PyResult<Vec<(u16, Option<Cqe>)>> {
        self.call(py, |q| {
            q.q.poll(&mut q.t)?;
            Ok(q.q.take_all().into_iter().map(|(cid, r)| (cid, r.ok().as_ref().map(cqe))).collect())
        })
    }

    /// Waits until command `cid` finishes or `timeout` seconds pass
    /// (transport time); its completion, or `None` on timeout.
    fn wait(&self, py: Python<'_>, cid: u16, timeout: f64) -> PyResult<Option<Cqe>> {
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(invalid(format!("timeout {timeout}: must be a finite number of seconds >= 0")));
        }
        let d = Duration::try_from_secs_f64(timeout).map_err(|_| invalid("timeout: too large"))?;
        self.call(py, move |q| {
            let deadline = q.t.now().checked_add(d).unwrap_or(Instant::FAR_FUTURE);
            loop {
                q.q.poll(&mut q.t)?;
                if let Some(r) = q.q.take(cid) {
                    return r.map(|c| Some(cqe(&c)));
                }
                if q.t.now() >= deadline {
                    return Ok(None);
                }
                q.q.wait(&mut q.t, deadline)?;
            }
        })
    }

    /// Registers `length` bytes in the queue's PD: (key, addr, lkey, rkey).
    fn allocate(&self, py: Python<'_>, length: u64) -> PyResult<(u32, u64, u32, u32)> {
        if length == 0 {
            return Err(invalid("length must be positive"));
        }
        self.call(py, move |q| {
            use rctb_core::transport::Access;
            let mr = q.t.reg_mr(q.pd, length, Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE)?;
            let key = q.buffers.keys().next_back().map_or(1, |k| k + 1);
            q.buffers.insert(key, mr);
            Ok((key, mr.addr, mr.lkey, mr.rkey))
        })
    }

    fn free_buffer(&self, py: Python<'_>, key: u32) -> PyResult<()> {
        self.call(py, move |q| match q.buffers.remove(&key) {
            Some(mr) => Ok(q.t.dereg_mr(mr.id)?),
            None => Ok(()),
        })
    }

    fn buffer_write(&self, py: Python<'_>, key: u32, data: Vec<u8>, offset: u64) -> PyResult<()> {
        self.call(py, move |q| {
            let mr = *q.buffers.get(&key).ok_or_else(|| err(format!("buffer {key} is closed")))?;
            Ok(q.t.mr_write(mr.id, offset, &data)?)
        })
    }

    fn buffer_read<'py>(&self, py: Python<'py>, key: u32, length: u64, offset: u64) -> PyResult<Bound<'py, PyBytes>> {
        let len = usize::try_from(length).map_err(|_| invalid("length: too large"))?;
        let data = self.call(py, move |q| {
            let mr = *q.buffers.get(&key).ok_or_else(|| err(format!("buffer {key} is closed")))?;
            let mut b = vec![0u8; len];
            q.t.mr_read(mr.id, offset, &mut b)?;
            Ok(b)
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// Buffer `key`'s registered memory without a copy (verbs only).
    fn buffer_view(&self, py: Python<'_>, key: u32) -> PyResult<Py<PyAny>> {
        let view = self.call(py, move |q| {
            #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
            let mr = *q.buffers.get(&key).ok_or_else(|| err(format!("buffer {key} is closed")))?;
            match &q.t {
                #[cfg(feature = "verbs")]
                Either::B(t) => Ok(Some(t.mr_export(mr.id, 0, mr.len)?)),
                _ => Ok(None),
            }
        })?;
        crate::verbs::view_or_refuse(py, view, false)
    }

    /// Disconnects and frees everything; idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| {
                if let Some(mut q) = s.remove::<QueueState>(id) {
                    q.close();
                }
            })
        })
        .map_err(engine_err)
    }
}

type Opener = (Arc<Engine>, Box<dyn FnOnce(&mut State) -> PyResult<QueueTransport> + Send>);

#[cfg(feature = "verbs")]
fn verbs_opener(source: Option<String>) -> PyResult<Opener> {
    let engine = Arc::new(Engine::start("verbs").map_err(|e| invalid(format!("starting the engine: {e}")))?);
    Ok((engine, Box::new(move |_: &mut State| crate::verbs::open_device(source.as_deref()).map(Either::B))))
}

#[cfg(not(feature = "verbs"))]
fn verbs_opener(_source: Option<String>) -> PyResult<Opener> {
    Err(crate::errors::no_verbs())
}

impl Drop for NvmeQueue {
    fn drop(&mut self) {
        let id = self.id;
        self.engine.post(move |s| {
            if let Some(mut q) = s.remove::<QueueState>(id) {
                q.close();
            }
        });
    }
}

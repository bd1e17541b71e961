//! `_rctb.RoceServer` and `_rctb.FpgaEngine`: rctb's RoCEv2 receive server
//! (`rctb_core::roce::RoceServer`) and the surf engine model
//! (`rctb_models::fpga`) on a simulated fabric, for `rctb.rocev2`.
//!
//! Frames: the server's zero-copy slot handles stay on the engine thread;
//! Python holds an id and releases it explicitly (the slot is re-posted
//! only then, so a consumer that holds frames makes the host answer RNR
//! NAKs: back-pressure). Channel views: each received frame goes to the
//! first open view that wants it (its channel, or every channel); a frame
//! no view wants is released at once (rogue's filter drops it too).

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use rctb_core::Transport;
use rctb_core::roce::{Frame, GidIndex, HostParams, RoceError, RoceServer, ServerConfig, TransportConfig};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::Psn;
use rctb_models::fpga::{FpgaEngine, Payload, StreamConfig, setup_connection, teardown_connection};
use rctb_sim::{Actor, SimTransport};
use rctb_udp::UdpTransport;

use crate::engine::{Engine, State};
use crate::errors::{engine_err, invalid};
use crate::sim::{FABRIC_ID, Fabric, FabricState};
use crate::udp::{UDP_ID, UdpNetwork, UdpState};

/// A deterministic PSN/key source drawn from the fabric's seed: the
/// SplitMix64 generator, whose n-th value is `splitmix64` of the seed plus
/// n - 1 golden-ratio steps (`splitmix64` adds the step itself).
fn seeded(seed: u64) -> impl FnMut() -> u32 {
    let mut x = seed;
    move || {
        let z = rctb_core::transport::seed::splitmix64(x);
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z as u32
    }
}

pub fn roce_err(e: RoceError) -> PyErr {
    match e {
        RoceError::Config(_) | RoceError::ChannelOutOfRange(_) => invalid(e.to_string()),
        RoceError::AlreadyConnected | RoceError::NotConnected | RoceError::Stopped | RoceError::ForeignFrame { .. } => {
            pyo3::exceptions::PyRuntimeError::new_err(e.to_string())
        }
        _ => pyo3::exceptions::PyOSError::new_err(e.to_string()),
    }
}

/// A receive server of any backend (PyO3 classes cannot be generic).
enum AnyServer {
    Sim(RoceServer<SimTransport>),
    Udp(RoceServer<UdpTransport>),
    #[cfg(feature = "verbs")]
    Verbs(Box<RoceServer<rctb_hw::VerbsTransport>>),
}

macro_rules! srv {
    ($s:expr, $x:ident => $body:expr) => {
        match $s {
            AnyServer::Sim($x) => $body,
            AnyServer::Udp($x) => $body,
            #[cfg(feature = "verbs")]
            AnyServer::Verbs($x) => $body,
        }
    };
}

/// The backend a server or engine is built on.
enum Backend {
    Sim(Arc<Engine>, u64),
    Udp(Arc<Engine>, u64),
    /// Real hardware: an engine thread of its own; PSNs from a random seed
    /// (rogue draws them at random too).
    #[cfg(feature = "verbs")]
    Verbs(Arc<Engine>, u64),
}

impl Backend {
    fn of(obj: &Bound<'_, PyAny>) -> PyResult<Backend> {
        if let Ok(f) = obj.cast::<Fabric>() {
            let f = f.get();
            Ok(Backend::Sim(f.engine.clone(), f.seed_value()))
        } else if let Ok(n) = obj.cast::<UdpNetwork>() {
            let n = n.get();
            Ok(Backend::Udp(n.engine.clone(), n.seed))
        } else if obj.extract::<String>().is_ok_and(|s| s == "verbs") {
            Self::verbs()
        } else {
            Err(pyo3::exceptions::PyTypeError::new_err("backend: a rctb.sim.Fabric, a rctb.udp.Network or 'verbs'"))
        }
    }
    #[cfg(feature = "verbs")]
    fn verbs() -> PyResult<Backend> {
        use std::hash::{BuildHasher, Hasher};
        let engine = Arc::new(Engine::start("verbs").map_err(|e| invalid(format!("starting the engine: {e}")))?);
        let seed = std::collections::hash_map::RandomState::new().build_hasher().finish();
        Ok(Backend::Verbs(engine, seed))
    }
    #[cfg(not(feature = "verbs"))]
    fn verbs() -> PyResult<Backend> {
        Err(crate::errors::no_verbs())
    }
    fn is_verbs(&self) -> bool {
        #[cfg(feature = "verbs")]
        if let Backend::Verbs(..) = self {
            return true;
        }
        false
    }
    fn engine(&self) -> Arc<Engine> {
        match self {
            Backend::Sim(e, _) | Backend::Udp(e, _) => e.clone(),
            #[cfg(feature = "verbs")]
            Backend::Verbs(e, _) => e.clone(),
        }
    }
    fn seed(&self) -> u64 {
        match self {
            Backend::Sim(_, s) | Backend::Udp(_, s) => *s,
            #[cfg(feature = "verbs")]
            Backend::Verbs(_, s) => *s,
        }
    }
    fn prefix(&self) -> &'static str {
        match self {
            Backend::Sim(..) => "sim-",
            Backend::Udp(..) => "udp-",
            #[cfg(feature = "verbs")]
            Backend::Verbs(..) => "",
        }
    }
}

#[cfg(feature = "verbs")]
fn verbs_server(device: &str, cfg: ServerConfig, rng: &mut impl FnMut() -> u32) -> PyResult<AnyServer> {
    let t = rctb_hw::VerbsTransport::open(device)
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("deviceName {device:?}: {e}")))?;
    Ok(AnyServer::Verbs(Box::new(RoceServer::create(t, cfg, rng).map_err(roce_err)?)))
}

#[cfg(not(feature = "verbs"))]
fn verbs_server(_device: &str, _cfg: ServerConfig, _rng: &mut impl FnMut() -> u32) -> PyResult<AnyServer> {
    Err(crate::errors::no_verbs())
}

struct ServerState {
    server: AnyServer,
    views: BTreeMap<u64, (Option<u8>, VecDeque<u64>)>,
    frames: BTreeMap<u64, Frame>,
    next: u64,
    dropped_unwanted: u64,
}

impl ServerState {
    /// Hands received frames to the views (or releases the unwanted ones).
    fn distribute(&mut self, got: Vec<Frame>) -> Result<(), RoceError> {
        for f in got {
            let ch = f.channel();
            let view = self.views.values_mut().find(|(want, _)| want.is_none_or(|c| c == ch));
            match view {
                Some((_, q)) => {
                    self.next += 1;
                    q.push_back(self.next);
                    self.frames.insert(self.next, f);
                }
                None => {
                    self.dropped_unwanted += 1;
                    srv!(&mut self.server, x => x.release(f))?;
                }
            }
        }
        Ok(())
    }
}

/// rctb's receive server on a fabric node.
#[pyclass(module = "rctb._rctb", name = "RoceServer", frozen)]
pub struct RoceServerHandle {
    engine: Arc<Engine>,
    id: u64,
}

impl RoceServerHandle {
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut ServerState) -> Result<R, RoceError> + Send + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| match s.get_mut::<ServerState>(id) {
                Some(st) => f(st),
                None => Err(RoceError::Stopped),
            })
        })
        .map_err(engine_err)?
        .map_err(roce_err)
    }
}

#[pymethods]
impl RoceServerHandle {
    #[new]
    #[pyo3(signature = (fabric, device, fpga_ip, ib_port, gid_index, max_payload, rx_queue_depth))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        fabric: &Bound<'_, PyAny>,
        device: String,
        fpga_ip: &str,
        ib_port: u8,
        gid_index: i64,
        max_payload: u32,
        rx_queue_depth: u32,
    ) -> PyResult<Self> {
        let ip: Ipv4Addr = fpga_ip.parse().map_err(|_| invalid(format!("ip {fpga_ip:?}: not an IPv4 address")))?;
        let gid = match gid_index {
            -1 => GidIndex::Auto,
            i if (0..=u32::MAX as i64).contains(&i) => GidIndex::Index(i as u32),
            i => return Err(invalid(format!("gidIndex {i}: -1 (detect) or a GID table index 0..=4294967295"))),
        };
        let backend = Backend::of(fabric)?;
        // A node or endpoint "host" is the RDMA device "sim-host" / "udp-host": accept either.
        let node = device.strip_prefix(backend.prefix()).unwrap_or(&device).to_string();
        let cfg = ServerConfig::builder(ip, format!("{}{node}", backend.prefix()))
            .ib_port(ib_port)
            .gid_index(gid)
            .max_payload(max_payload)
            .rx_queue_depth(rx_queue_depth)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let (engine, seed, udp) = (backend.engine(), backend.seed(), matches!(backend, Backend::Udp(..)));
        let verbs = backend.is_verbs();
        let e2 = engine.clone();
        let id = py
            .detach(move || {
                e2.call(move |s: &mut State| -> PyResult<u64> {
                    let mut rng = seeded(seed ^ 0x524F_4345_7632);
                    let server = if verbs {
                        verbs_server(&node, cfg, &mut rng)?
                    } else if udp {
                        let us = s.get_mut::<UdpState>(UDP_ID).ok_or_else(|| invalid("the network is gone"))?;
                        let t = us.take(&node).map_err(|e| invalid(format!("deviceName: {e}")))?;
                        AnyServer::Udp(RoceServer::create(t, cfg, &mut rng).map_err(roce_err)?)
                    } else {
                        let fs = s.get::<FabricState>(FABRIC_ID).ok_or_else(|| invalid("the fabric is gone"))?;
                        let t = fs.transport_of(Some(&node)).map_err(|e| invalid(format!("deviceName: {e}")))?;
                        AnyServer::Sim(RoceServer::create(t, cfg, &mut rng).map_err(roce_err)?)
                    };
                    Ok(s.insert(ServerState {
                        server,
                        views: BTreeMap::new(),
                        frames: BTreeMap::new(),
                        next: 0,
                        dropped_unwanted: 0,
                    }))
                })
            })
            .map_err(engine_err)??;
        Ok(RoceServerHandle { engine, id })
    }

    /// (hostQpn, hostRqPsn, hostSqPsn, mrAddr, mrLen)
    fn host_params(&self, py: Python<'_>) -> PyResult<(u32, u32, u32, u64, u64)> {
        self.call(py, |s| {
            let h = srv!(&s.server, x => x.host_params());
            Ok((h.qpn, h.rq_psn.get(), h.sq_psn.get(), h.mr_addr, h.mr_len))
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn complete_connection(
        &self,
        py: Python<'_>,
        fpga_qpn: u32,
        pmtu: u8,
        min_rnr_timer: u8,
        rnr_retry: u8,
        retry_count: u8,
        fpga_lkey: u32,
    ) -> PyResult<()> {
        let tc = TransportConfig::from_codes(pmtu, min_rnr_timer, rnr_retry, retry_count)
            .map_err(|e| invalid(e.to_string()))?;
        self.call(py, move |s| srv!(&mut s.server, x => x.complete_connection(fpga_qpn, &tc, fpga_lkey)))
    }

    /// Opens a view of `channel` (every channel when `None`); its id.
    #[pyo3(signature = (channel = None))]
    fn open_view(&self, py: Python<'_>, channel: Option<u32>) -> PyResult<u64> {
        let ch = channel.map(|c| rctb_core::roce::Channel::new(c).map(|c| c.get())).transpose().map_err(roce_err)?;
        self.call(py, move |s| {
            let id = s.views.keys().next_back().map_or(1, |k| k + 1);
            s.views.insert(id, (ch, VecDeque::new()));
            Ok(id)
        })
    }

    /// Closes a view, releasing the frames it has not handed out.
    fn close_view(&self, py: Python<'_>, view: u64) -> PyResult<()> {
        self.call(py, move |s| {
            if let Some((_, q)) = s.views.remove(&view) {
                for id in q {
                    if let Some(f) = s.frames.remove(&id) {
                        srv!(&mut s.server, x => x.release(f))?;
                    }
                }
            }
            Ok(())
        })
    }

    /// The next frame of `view`, waiting up to `timeout` seconds of the
    /// transport's time: (frame id, channel, ring position, length), or
    /// `None` when nothing came.
    fn next_frame(&self, py: Python<'_>, view: u64, timeout: f64) -> PyResult<Option<(u64, u8, u32, u32)>> {
        if !timeout.is_finite() || timeout < 0.0 {
            return Err(invalid(format!("timeout {timeout}: must be a finite number of seconds >= 0")));
        }
        let d = Duration::try_from_secs_f64(timeout).map_err(|_| invalid("timeout: too large"))?;
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| -> Result<_, RoceError> {
                let (deadline, udp) = {
                    let st = s.get_mut::<ServerState>(id).ok_or(RoceError::Stopped)?;
                    let now = srv!(&st.server, x => x.transport().now());
                    (now.checked_add(d).unwrap_or(Instant::FAR_FUTURE), matches!(st.server, AnyServer::Udp(_)))
                };
                loop {
                    if udp {
                        // On udp the engine models are no simulator actors
                        // (their transports share the reactor): pump them here.
                        for e in s.values_mut::<EngineState>() {
                            if let AnyEngine::Udp(e) = &e.engine {
                                let _ = e.borrow_mut().pump();
                            }
                        }
                    }
                    let st = s.get_mut::<ServerState>(id).ok_or(RoceError::Stopped)?;
                    let Some((_, q)) = st.views.get_mut(&view) else { return Err(RoceError::Stopped) };
                    if let Some(fid) = q.pop_front() {
                        let f = &st.frames[&fid];
                        return Ok(Some((fid, f.channel(), f.ring_position(), f.len())));
                    }
                    let now = srv!(&st.server, x => x.transport().now());
                    if now >= deadline {
                        return Ok(None);
                    }
                    // Real time on udp: wake every millisecond to pump the engines.
                    let until = if udp {
                        deadline.min(now.checked_add(Duration::from_millis(1)).unwrap_or(deadline))
                    } else {
                        deadline
                    };
                    let mut got = Vec::new();
                    srv!(&mut st.server, x => x.wait_frames(&mut got, until))?;
                    st.distribute(got)?;
                }
            })
        })
        .map_err(engine_err)?
        .map_err(roce_err)
    }

    /// A copy of a held frame's bytes.
    fn frame_data<'py>(&self, py: Python<'py>, frame: u64) -> PyResult<Bound<'py, PyBytes>> {
        let data = self.call(py, move |s| {
            let f = s.frames.get(&frame).ok_or(RoceError::ForeignFrame { slot: u32::MAX })?;
            srv!(&s.server, x => x.frame_data(f))
        })?;
        Ok(PyBytes::new(py, &data))
    }

    /// A held frame's bytes in its receive slot, without a copy (verbs
    /// only). Its `exports` count says whether Python still looks at it:
    /// `release` refuses while it does.
    fn frame_view(&self, py: Python<'_>, frame: u64) -> PyResult<Py<PyAny>> {
        let view = self.call(py, move |s| {
            #[cfg_attr(not(feature = "verbs"), allow(unused_variables))]
            let f = s.frames.get(&frame).ok_or(RoceError::ForeignFrame { slot: u32::MAX })?;
            match &s.server {
                #[cfg(feature = "verbs")]
                AnyServer::Verbs(x) => {
                    let (mr, offset, len) = x.frame_span(f)?;
                    Ok(Some(x.transport().mr_export(mr, offset, len)?))
                }
                _ => Ok(None),
            }
        })?;
        crate::verbs::view_or_refuse(py, view, true)
    }

    /// Whether a held frame's bytes are the PRBS of its channel and ring
    /// position (the FPGA model's payload): `None` if so, else the first
    /// differing byte offset.
    fn frame_prbs_mismatch(&self, py: Python<'_>, frame: u64) -> PyResult<Option<usize>> {
        self.call(py, move |s| {
            let f = s.frames.get(&frame).ok_or(RoceError::ForeignFrame { slot: u32::MAX })?;
            let data = srv!(&s.server, x => x.frame_data(f))?;
            Ok(rctb_core::roce::prbs_check(f.channel(), f.ring_position(), &data).err())
        })
    }

    /// Releases a held frame (its slot is re-posted); again: no effect.
    fn release(&self, py: Python<'_>, frame: u64) -> PyResult<()> {
        self.call(py, move |s| match s.frames.remove(&frame) {
            Some(f) => srv!(&mut s.server, x => x.release(f)),
            None => Ok(()),
        })
    }

    /// Whether `frame_view` gives the slot itself (the verbs backend).
    #[getter]
    fn zero_copy(&self, py: Python<'_>) -> PyResult<bool> {
        self.call(py, |s| {
            #[cfg(feature = "verbs")]
            if let AnyServer::Verbs(_) = s.server {
                return Ok(true);
            }
            let _ = s;
            Ok(false)
        })
    }

    #[getter]
    fn held_frames(&self, py: Python<'_>) -> PyResult<u32> {
        self.call(py, |s| Ok(srv!(&s.server, x => x.held_frames())))
    }

    /// The 15 status fields, by rogue's names.
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let st = self.call(py, |s| Ok(srv!(&s.server, x => x.status())))?;
        let d = PyDict::new(py);
        d.set_item("FpgaIp", st.fpga_ip.to_string())?;
        d.set_item("FpgaGid", st.fpga_gid.to_string())?;
        d.set_item("HostQpn", st.host_qpn)?;
        d.set_item("HostGid", st.host_gid.to_string())?;
        d.set_item("HostIp", st.host_ip.map(|i| i.to_string()))?;
        d.set_item("MrAddr", st.mr_addr)?;
        d.set_item("MrRkey", st.mr_rkey)?;
        d.set_item("RxFrameCount", st.rx_frame_count)?;
        d.set_item("RxByteCount", st.rx_byte_count)?;
        d.set_item("MaxPayload", st.max_payload)?;
        d.set_item("RxQueueDepth", st.rx_queue_depth)?;
        d.set_item("HostRqPsn", st.host_rq_psn.get())?;
        d.set_item("HostSqPsn", st.host_sq_psn.get())?;
        d.set_item("FpgaQpn", st.fpga_qpn)?;
        d.set_item("FpgaLkey", st.fpga_lkey)?;
        Ok(d)
    }

    /// The receive counters.
    fn counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (c, unwanted) = self.call(py, |s| Ok((srv!(&s.server, x => x.counters()), s.dropped_unwanted)))?;
        let d = PyDict::new(py);
        for (k, v) in [
            ("frames", c.frames),
            ("bytes", c.bytes),
            ("bad_wr_id", c.bad_wr_id),
            ("errors", c.errors),
            ("flushed", c.flushed),
            ("wrong_opcode", c.wrong_opcode),
            ("bad_length", c.bad_length),
            ("filtered_out", c.filtered_out + unwanted),
        ] {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    /// The connection summary (rogue `printConnInfo`).
    fn conn_info(&self, py: Python<'_>) -> PyResult<String> {
        self.call(py, |s| Ok(srv!(&s.server, x => x.status()).to_string()))
    }

    /// Stops the server (QP to ERR, CQ and QP freed; held frames stay
    /// readable until released). Idempotent.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |s| srv!(&mut s.server, x => x.stop()))
    }
}

impl Drop for RoceServerHandle {
    fn drop(&mut self) {
        let id = self.id;
        self.engine.post(move |s| {
            if let Some(mut st) = s.remove::<ServerState>(id) {
                let _ = srv!(&mut st.server, x => x.stop());
                for (_, f) in std::mem::take(&mut st.frames) {
                    let _ = srv!(&mut st.server, x => x.release(f));
                }
            }
        });
    }
}

/// The engine model as a simulator actor: it streams as time passes.
struct EngineActor<T: Transport>(Rc<RefCell<FpgaEngine<T>>>);

impl<T: Transport> Actor for EngineActor<T> {
    fn run(&mut self, _t: &mut SimTransport) -> Option<Instant> {
        match self.0.try_borrow_mut() {
            Ok(mut e) => e.pump().ok().flatten(),
            Err(_) => None,
        }
    }
}

/// An engine model of any backend.
enum AnyEngine {
    Sim(Rc<RefCell<FpgaEngine<SimTransport>>>),
    Udp(Rc<RefCell<FpgaEngine<UdpTransport>>>),
}

macro_rules! eng {
    ($s:expr, $x:ident => $body:expr) => {
        match $s {
            AnyEngine::Sim($x) => $body,
            AnyEngine::Udp($x) => $body,
        }
    };
}

struct EngineState {
    engine: AnyEngine,
    params: Option<rctb_models::fpga::FpgaParams>,
    rng: Box<dyn FnMut() -> u32>,
    mr_len: u32,
}

/// The surf RoCEv2 engine model on a fabric node (the FPGA).
#[pyclass(module = "rctb._rctb", name = "FpgaEngine", frozen)]
pub struct FpgaEngineHandle {
    engine: Arc<Engine>,
    id: u64,
}

impl FpgaEngineHandle {
    fn call<R: Send + 'static>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut EngineState) -> Result<R, String> + Send + 'static,
    ) -> PyResult<R> {
        let engine = self.engine.clone();
        let id = self.id;
        py.detach(move || {
            engine.call(move |s: &mut State| match s.get_mut::<EngineState>(id) {
                Some(st) => f(st),
                None => Err("the engine is gone".into()),
            })
        })
        .map_err(engine_err)?
        .map_err(invalid)
    }
}

#[pymethods]
impl FpgaEngineHandle {
    #[new]
    #[pyo3(signature = (fabric, node, host_ip, *, sgid_index = 1, mr_len = 1 << 20))]
    fn new(
        py: Python<'_>,
        fabric: &Bound<'_, PyAny>,
        node: String,
        host_ip: &str,
        sgid_index: u32,
        mr_len: u32,
    ) -> PyResult<Self> {
        let host: Ipv4Addr =
            host_ip.parse().map_err(|_| invalid(format!("hostIp {host_ip:?}: not an IPv4 address")))?;
        let backend = Backend::of(fabric)?;
        if backend.is_verbs() {
            return Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "the FPGA engine model runs on a rctb.sim.Fabric or a rctb.udp.Network; over verbs, run `rctb fpga-emu`",
            ));
        }
        let (engine, seed, udp) = (backend.engine(), backend.seed(), matches!(backend, Backend::Udp(..)));
        let e2 = engine.clone();
        let id = py
            .detach(move || {
                e2.call(move |s: &mut State| -> Result<u64, String> {
                    let engine = if udp {
                        let us = s.get_mut::<UdpState>(UDP_ID).ok_or("the network is gone")?;
                        let t = us.take(&node)?;
                        // Pumped by the servers' waits (see next_frame), not as an actor.
                        AnyEngine::Udp(Rc::new(RefCell::new(FpgaEngine::new(t, host, sgid_index))))
                    } else {
                        let fs = s.get::<FabricState>(FABRIC_ID).ok_or("the fabric is gone")?;
                        let t = fs.transport_of(Some(&node))?;
                        let node_id = fs.sim.node(&node).map_err(|e| e.to_string())?;
                        let engine = Rc::new(RefCell::new(FpgaEngine::new(t, host, sgid_index)));
                        fs.sim.add_actor(node_id, Box::new(EngineActor(engine.clone())));
                        AnyEngine::Sim(engine)
                    };
                    Ok(s.insert(EngineState {
                        engine,
                        params: None,
                        rng: Box::new(seeded(seed ^ 0x4650_4741)),
                        mr_len,
                    }))
                })
            })
            .map_err(engine_err)?
            .map_err(invalid)?;
        Ok(FpgaEngineHandle { engine, id })
    }

    /// The surf setup sequence; (fpgaQpn, fpgaLkey, pdHandler, fpgaRkey).
    #[allow(clippy::too_many_arguments)]
    fn setup_connection(
        &self,
        py: Python<'_>,
        host_qpn: u32,
        host_rq_psn: u32,
        host_sq_psn: u32,
        mr_addr: u64,
        mr_len: u64,
        pmtu: u8,
        min_rnr_timer: u8,
        rnr_retry: u8,
        retry_count: u8,
    ) -> PyResult<(u32, u32, u32, u32)> {
        let tc = TransportConfig::from_codes(pmtu, min_rnr_timer, rnr_retry, retry_count)
            .map_err(|e| invalid(e.to_string()))?;
        let psn = |field: &str, v: u32| Psn::new(v).map_err(|_| invalid(format!("{field} {v:#x}: a PSN is 24 bits")));
        let host = HostParams {
            qpn: host_qpn,
            rq_psn: psn("hostRqPsn", host_rq_psn)?,
            sq_psn: psn("hostSqPsn", host_sq_psn)?,
            mr_addr,
            mr_len,
            rkey: 0,
        };
        self.call(py, move |s| {
            let (mr_len, rng) = (s.mr_len, &mut s.rng);
            let p = eng!(&s.engine, e => setup_connection(&mut e.borrow_mut(), &host, &tc, mr_len, rng))
                .map_err(|e| e.to_string())?;
            s.params = Some(p);
            Ok((p.qpn, p.lkey, p.pd_handler, p.rkey))
        })
    }

    /// Starts streaming PRBS frames: frame i on channels[i % n] with
    /// sizes[i % m] bytes, `gap` seconds apart, at most `window` in flight.
    #[pyo3(signature = (channels, sizes, count, *, gap = 0.0, window = 16))]
    fn start_stream(
        &self,
        py: Python<'_>,
        channels: Vec<u8>,
        sizes: Vec<u32>,
        count: u64,
        gap: f64,
        window: u32,
    ) -> PyResult<()> {
        if !gap.is_finite() || gap < 0.0 {
            return Err(invalid(format!("gap {gap}: must be a finite number of seconds >= 0")));
        }
        let gap = Duration::try_from_secs_f64(gap).map_err(|_| invalid("gap: too large"))?;
        let cfg = StreamConfig { channels, sizes, count, gap, window, payload: Payload::Prbs };
        self.call(py, move |s| {
            eng!(&s.engine, e => {
                let mut e = e.borrow_mut();
                e.start_stream(cfg).map_err(|e| e.to_string())?;
                // The first sends go now; the actor keeps pumping as time passes.
                e.pump().map(|_| ()).map_err(|e| e.to_string())
            })
        })
    }

    /// (posted, completed, bytes, errors) of the stream.
    fn stream_stats(&self, py: Python<'_>) -> PyResult<(u64, u64, u64, Vec<String>)> {
        self.call(py, |s| {
            Ok(eng!(&s.engine, e => e.borrow().stream_stats().map_or((0, 0, 0, Vec::new()), |st| {
                (st.posted, st.completed, st.bytes, st.errors.iter().map(|w| w.name().to_string()).collect())
            })))
        })
    }

    /// The surf teardown (ERR, destroy QP, free MR, free PD).
    fn teardown(&self, py: Python<'_>) -> PyResult<()> {
        self.call(py, |s| match s.params.take() {
            Some(p) => eng!(&s.engine, e => teardown_connection(&mut e.borrow_mut(), &p)).map_err(|e| e.to_string()),
            None => Ok(()),
        })
    }
}

/// rogue's `detectGidIndex`: the RoCE v2, IPv4-mapped GID on the /24 of
/// `ip` in the port's sysfs GID table (rctb-hw's scan), or `None`.
#[pyfunction]
#[pyo3(signature = (device, ip, ib_port = 1, sysfs_root = "/sys".to_string()))]
pub fn detect_gid_index(device: &str, ip: &str, ib_port: u8, sysfs_root: String) -> PyResult<Option<u32>> {
    let ip: Ipv4Addr = ip.parse().map_err(|_| invalid(format!("ip {ip:?}: not an IPv4 address")))?;
    if device.is_empty() || device.contains('/') {
        return Err(invalid(format!("device {device:?}: an RDMA device name such as rxe0 or mlx5_0")));
    }
    Ok(rctb_hw::detect_gid_index(std::path::Path::new(&sysfs_root), device, ib_port, ip).ok())
}

//! `rctb.udp.Network`: the `udp` backend (rctb's RC engine as a RoCEv2 peer
//! on ordinary UDP sockets, no RDMA anywhere). Endpoints are made here and
//! taken by the receive server or the FPGA engine model that runs on them
//! (each endpoint once). Real time: waits block on the sockets. The
//! backend carries RDMA CM now (`rctb nvme --backend udp` uses it), but
//! the NVMe-oF classes here do not take it yet; the RoCEv2 hand-off (QPN,
//! PSN, GID out of band) does.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use pyo3::prelude::*;
use rctb_core::transport::Mtu;
use rctb_udp::{UdpConfig, UdpReactor, UdpTransport};

use crate::engine::{Engine, State};
use crate::errors::{engine_err, invalid};

pub const UDP_ID: u64 = 1;

pub struct UdpState {
    pub reactor: UdpReactor,
    pub endpoints: BTreeMap<String, UdpTransport>,
}

impl UdpState {
    /// Takes the endpoint named `name` (or `udp-NAME`).
    pub fn take(&mut self, name: &str) -> Result<UdpTransport, String> {
        let key = name.strip_prefix("udp-").unwrap_or(name);
        self.endpoints.remove(key).ok_or_else(|| {
            format!("{name:?}: no free endpoint of that name (add one with network.add_endpoint; each is used once)")
        })
    }
}

/// A set of UDP endpoints sharing one reactor.
#[pyclass(module = "rctb._rctb", frozen)]
pub struct UdpNetwork {
    pub engine: Arc<Engine>,
    pub seed: u64,
}

#[pymethods]
impl UdpNetwork {
    #[new]
    #[pyo3(signature = (seed = 0))]
    fn new(py: Python<'_>, seed: u64) -> PyResult<Self> {
        let engine = Arc::new(Engine::start("udp").map_err(|e| invalid(format!("starting the engine: {e}")))?);
        let e2 = engine.clone();
        py.detach(move || {
            e2.call(move |s: &mut State| {
                s.insert(UdpState { reactor: UdpReactor::new(Some(seed)), endpoints: BTreeMap::new() });
            })
        })
        .map_err(engine_err)?;
        Ok(UdpNetwork { engine, seed })
    }

    /// Binds an endpoint `name` (device `udp-NAME`) on `ip`:`port`, talking
    /// to peers on `peer_port`.
    #[pyo3(signature = (name, ip, *, port = 4791, peer_port = 4791, mtu = 4096))]
    fn add_endpoint(
        &self,
        py: Python<'_>,
        name: String,
        ip: &str,
        port: u16,
        peer_port: u16,
        mtu: u32,
    ) -> PyResult<String> {
        let ip: Ipv4Addr = ip.parse().map_err(|_| invalid(format!("ip {ip:?}: not an IPv4 address")))?;
        let mtu = Mtu::ALL
            .into_iter()
            .find(|m| m.bytes() == mtu)
            .ok_or_else(|| invalid(format!("mtu {mtu}: must be one of 256, 512, 1024, 2048, 4096")))?;
        if name.is_empty() {
            return Err(invalid("name: must not be empty"));
        }
        let seed = self.seed;
        let engine = self.engine.clone();
        py.detach(move || {
            engine.call(move |s: &mut State| -> Result<String, String> {
                let st = s.get_mut::<UdpState>(UDP_ID).ok_or("the network is gone")?;
                if st.endpoints.contains_key(&name) {
                    return Err(format!("name {name:?}: already used"));
                }
                let mut cfg = UdpConfig::new(name.clone(), ip);
                cfg.port = port;
                cfg.peer_port = peer_port;
                cfg.mtu = mtu;
                cfg.seed = Some(seed);
                let t = st.reactor.endpoint(cfg).map_err(|e| format!("binding {ip}:{port}: {e}"))?;
                st.endpoints.insert(name.clone(), t);
                Ok(name)
            })
        })
        .map_err(engine_err)?
        .map_err(invalid)
    }
}

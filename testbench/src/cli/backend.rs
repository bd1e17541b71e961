//! The one backend opener of the front ends: which backends this build of
//! rctb has, and how a front end opens an RC end on each (`sim | udp |
//! verbs`). This is the only place where `cfg(feature = "verbs")` decides.
//!
//! - **sim** is always there: a front end builds its fabric with
//!   [`sim_node`] (nodes as rxe is on a 1500-byte link).
//! - **udp** is always there: [`Endpoint::parse`] tells a UDP endpoint
//!   (`ADDR` or `ADDR:PORT`) from an RDMA device name, and [`udp_config`]
//!   is an endpoint bound there.
//! - **verbs** (rctb-hw over libibverbs/librdmacm, the cargo feature
//!   `verbs`, whose build needs rdma-core's headers and libclang): call
//!   [`verbs`] first, before looking at any other argument of a verbs path.
//!   It is `Err(NoVerbs)` in a build without the backend (its message is
//!   [`NO_VERBS`]: what is missing and how to get it), so every front end
//!   says the same thing. Its `Ok` value, [`Verbs`], is the only way to
//!   [open](Verbs::open) a device ([`Device`]: rctb-hw's `VerbsTransport`)
//!   or [list](Verbs::list_devices) them. In a build without the backend
//!   `Verbs` and `Device` are empty types: front ends compile their verbs
//!   paths in every build, with no stubs of their own, and those paths
//!   cannot run there.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::transport::{DeviceInfo, Mtu, PortInfo, TransportError};
use rctb_core::wire::roce::ROCEV2_UDP_PORT;
use rctb_sim::{NodeConfig, NodeId, Sim, SimError};
use rctb_udp::UdpConfig;

/// Whether the verbs backend is compiled in (cargo feature `verbs`).
pub const VERBS: bool = cfg!(feature = "verbs");

/// What a verbs path says in a build without the verbs backend: what is
/// missing and how to get it.
pub const NO_VERBS: &str = "this rctb was built without the verbs backend: apt-get install libibverbs-dev \
    librdmacm-dev libclang-dev, then cargo build --release -p rctb --features verbs";

/// The line of [`SUMMARY`] as a literal, for `concat!` (`rctb --version`).
#[cfg(feature = "verbs")]
#[macro_export]
macro_rules! backends_line {
    () => {
        "backends: sim yes, udp yes, verbs yes"
    };
}
/// The line of [`SUMMARY`] as a literal, for `concat!` (`rctb --version`).
#[cfg(not(feature = "verbs"))]
#[macro_export]
macro_rules! backends_line {
    () => {
        "backends: sim yes, udp yes, verbs no (build with --features verbs)"
    };
}

/// The object stores `rctb object serve` has in this build, as a literal
/// for `concat!` (`rctb --version`).
#[cfg(feature = "s3")]
#[macro_export]
macro_rules! stores_line {
    () => {
        "object stores: fs yes, s3 yes"
    };
}
/// The object stores `rctb object serve` has in this build, as a literal
/// for `concat!` (`rctb --version`).
#[cfg(not(feature = "s3"))]
#[macro_export]
macro_rules! stores_line {
    () => {
        "object stores: fs yes, s3 no (build with --features s3)"
    };
}

/// One line naming each backend and whether this build has it, as
/// `rctb --version` and `rctb --help` print it.
pub const SUMMARY: &str = backends_line!();

/// The `--backend` of `rctb run` and `rctb conformance`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Sim,
    Verbs,
    Udp,
}

// ---- sim ----

/// Adds node `name` at `ip` to `sim` with the active MTU `mtu` (1024: rxe
/// on a 1500-byte link).
pub fn sim_node(sim: &Sim, name: &str, ip: Ipv4Addr, mtu: Mtu) -> Result<NodeId, SimError> {
    sim.add_node({
        let mut node_config = NodeConfig::new(name, ip);
        node_config.mtu = mtu;
        node_config
    })
}

// ---- udp ----

/// One RC end as `--device` / `--peer` name it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// An IPv4 address (port 4791) or `ADDR:PORT`: a UDP endpoint (rctb-udp).
    Udp(SocketAddrV4),
    /// Anything else: an RDMA device, opened with [`Verbs::open`].
    Device(String),
}

impl Endpoint {
    /// What `text` names: an IPv4 address or `ADDR:PORT` is a UDP endpoint.
    pub fn parse(text: &str) -> Endpoint {
        if let Ok(a) = text.parse::<SocketAddrV4>() {
            return Endpoint::Udp(a);
        }
        match text.parse::<Ipv4Addr>() {
            Ok(ip) => Endpoint::Udp(SocketAddrV4::new(ip, ROCEV2_UDP_PORT)),
            Err(_) => Endpoint::Device(text.to_string()),
        }
    }

    /// The UDP endpoint's address, if `text` names one.
    pub fn udp(text: &str) -> Option<SocketAddrV4> {
        match Endpoint::parse(text) {
            Endpoint::Udp(at) => Some(at),
            Endpoint::Device(_) => None,
        }
    }
}

/// A UDP endpoint `name` bound at `at`, its peers on the same port, with
/// the active MTU `mtu`.
pub fn udp_config(name: &str, at: SocketAddrV4, mtu: Mtu) -> UdpConfig {
    let mut cfg = UdpConfig::new(name, *at.ip());
    cfg.mtu = mtu;
    cfg.port = at.port();
    cfg.peer_port = at.port();
    cfg
}

// ---- verbs ----

/// The error of [`verbs`] in a build without the verbs backend; it reads
/// [`NO_VERBS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoVerbs;

impl fmt::Display for NoVerbs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(NO_VERBS)
    }
}

impl std::error::Error for NoVerbs {}

/// Why [`Verbs::open`] failed: `opening NAME: ERROR`.
#[derive(Debug)]
pub struct OpenError {
    /// The device asked for.
    pub name: String,
    /// What rctb-hw said.
    pub error: TransportError,
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "opening {}: {}", self.name, self.error)
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// One RDMA device as `rctb devices` lists it.
#[derive(Clone, Debug)]
pub struct DeviceFacts {
    pub name: String,
    pub device: DeviceInfo,
    /// Every physical port (1-based), each with its GID table.
    pub ports: Vec<PortInfo>,
}

/// The verbs backend, proof that this build has it (from [`verbs`]).
#[derive(Clone, Copy, Debug)]
pub struct Verbs(Built);

/// The verbs backend when this build has it, else [`NoVerbs`].
pub fn verbs() -> Result<Verbs, NoVerbs> {
    built().map(Verbs)
}

impl Verbs {
    /// Opens RDMA device `name` (e.g. `rxe0`).
    pub fn open(self, name: &str) -> Result<Device, OpenError> {
        open(self.0, name).map_err(|error| OpenError { name: name.to_string(), error })
    }

    /// Every RDMA device with its ports and GID tables (`NoDevice`, with a
    /// hint, when there is none).
    pub fn list_devices(self) -> Result<Vec<DeviceFacts>, TransportError> {
        list_devices(self.0)
    }

    /// What rctb-hw says when this machine has no RDMA device.
    pub fn no_device_hint(self) -> &'static str {
        no_device_hint(self.0)
    }
}

// The one place the feature decides: `with` wraps rctb-hw, `without`
// holds empty stand-ins. Each has `Built` (what `Verbs` holds), `Device`,
// `built`, `open`, `list_devices` and `no_device_hint`.
#[cfg(feature = "verbs")]
mod with;
#[cfg(not(feature = "verbs"))]
mod without;
#[cfg(feature = "verbs")]
use with as imp;
#[cfg(not(feature = "verbs"))]
use without as imp;

pub use imp::Device;
use imp::{Built, built, list_devices, no_device_hint, open};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_what_this_build_has() {
        assert!(SUMMARY.starts_with("backends: sim yes, udp yes, verbs "));
        assert_eq!(SUMMARY.contains("verbs yes"), VERBS);
        assert!(NO_VERBS.contains("--features verbs") && NO_VERBS.contains("libibverbs-dev"));
    }

    #[test]
    fn verbs_is_there_exactly_when_built() {
        assert_eq!(verbs().is_ok(), VERBS);
        assert_eq!(verbs().err().map(|e| e.to_string()), (!VERBS).then(|| NO_VERBS.to_string()));
    }

    #[test]
    fn an_endpoint_is_an_address_or_a_device() {
        let udp = |a: [u8; 4], p| Endpoint::Udp(SocketAddrV4::new(a.into(), p));
        assert_eq!(Endpoint::parse("10.0.0.1"), udp([10, 0, 0, 1], 4791));
        assert_eq!(Endpoint::parse("10.0.0.1:5000"), udp([10, 0, 0, 1], 5000));
        assert_eq!(Endpoint::parse("rxe0"), Endpoint::Device("rxe0".into()));
        assert_eq!(Endpoint::udp("rxe0"), None);
    }
}

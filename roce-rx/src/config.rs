//! Validated configuration of the receive server (docs/protocols.md §1.1).
//!
//! Both configs are built through constructors that check every field, so a
//! `ServerConfig` or `TransportConfig` that exists is one the server accepts
//! (device limits aside, which only the transport knows). Errors are
//! [`InvalidValue`]s: they name the field, the value and the valid range.

use std::net::Ipv4Addr;

use crate::transport::{InvalidValue, Mtu, RnrTimer};

/// Largest receive queue depth accepted (the simulator's and rxe's
/// `max_qp_wr` is 2^15; a device may allow less, which `create` checks).
pub const MAX_RX_QUEUE_DEPTH: u32 = 1 << 15;

/// Which GID table entry of the port the host QP sources its traffic from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum GidIndex {
    /// Pick the RoCE v2 IPv4-mapped GID on the FPGA's /24 from the port's GID
    /// table when the server is created (rogue's `gidIndex = -1`).
    #[default]
    Auto,
    /// Use this index. Kept as `u32`: an index above 255 must not be truncated.
    Index(u32),
}

/// Host-side configuration: which FPGA, which device and port, and the size
/// of the receive slab.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    fpga_ip: Ipv4Addr,
    device: String,
    ib_port: u8,
    gid_index: GidIndex,
    max_payload: u32,
    rx_queue_depth: u32,
}

impl ServerConfig {
    /// The defaults of §1 (port 1, auto GID, 4096-byte payloads, 256 slots).
    pub fn new(fpga_ip: Ipv4Addr, device: impl Into<String>) -> Self {
        ServerConfig {
            fpga_ip,
            device: device.into(),
            ib_port: 1,
            gid_index: GidIndex::Auto,
            max_payload: 4096,
            rx_queue_depth: 256,
        }
    }

    /// A builder starting from [`ServerConfig::new`]'s defaults.
    pub fn builder(fpga_ip: Ipv4Addr, device: impl Into<String>) -> ServerConfigBuilder {
        ServerConfigBuilder { cfg: ServerConfig::new(fpga_ip, device) }
    }

    /// The FPGA's IPv4 address: the RC peer, and with [`GidIndex::Auto`] the /24
    /// the host GID must be on.
    pub fn fpga_ip(&self) -> Ipv4Addr {
        self.fpga_ip
    }
    /// The RDMA device the transport must drive (`create` says
    /// `DeviceMismatch` otherwise).
    pub fn device(&self) -> &str {
        &self.device
    }
    /// The host port, 1-based (default 1).
    pub fn ib_port(&self) -> u8 {
        self.ib_port
    }
    /// Which GID the host QP sources from (default [`GidIndex::Auto`]).
    pub fn gid_index(&self) -> GidIndex {
        self.gid_index
    }
    /// Bytes per receive slot, the largest frame accepted (default 4096).
    pub fn max_payload(&self) -> u32 {
        self.max_payload
    }
    /// Receive slots, 1..=32768 (default 256): receives posted, and the CQ's
    /// depth.
    pub fn rx_queue_depth(&self) -> u32 {
        self.rx_queue_depth
    }
    /// Bytes of the receive slab: depth x max payload (always below 2^32).
    pub fn slab_len(&self) -> u64 {
        self.rx_queue_depth as u64 * self.max_payload as u64
    }

    fn validate(&self) -> Result<(), InvalidValue> {
        if self.device.is_empty() {
            return Err(InvalidValue::new("device", 0, "must name a device (non-empty)"));
        }
        if self.ib_port == 0 {
            return Err(InvalidValue::new("ib_port", 0, "must be 1..=255 (ports are 1-based)"));
        }
        if self.max_payload == 0 {
            return Err(InvalidValue::new("max_payload", 0, "must be > 0"));
        }
        if self.rx_queue_depth == 0 || self.rx_queue_depth > MAX_RX_QUEUE_DEPTH {
            return Err(InvalidValue::new("rx_queue_depth", self.rx_queue_depth as u64, "must be 1..=32768"));
        }
        // The slab is one MR whose length the FPGA takes as a 32-bit field.
        if self.slab_len() >= 1 << 32 {
            return Err(InvalidValue::new(
                "rx_queue_depth * max_payload",
                self.slab_len(),
                "the receive slab must be < 2^32 bytes",
            ));
        }
        Ok(())
    }
}

/// Builds a [`ServerConfig`]; [`build`](Self::build) validates every field.
#[derive(Clone, Debug)]
pub struct ServerConfigBuilder {
    cfg: ServerConfig,
}

impl ServerConfigBuilder {
    /// Sets the host port (1-based; 0 fails in `build`).
    pub fn ib_port(mut self, port: u8) -> Self {
        self.cfg.ib_port = port;
        self
    }
    /// Sets which GID the host QP sources from.
    pub fn gid_index(mut self, index: GidIndex) -> Self {
        self.cfg.gid_index = index;
        self
    }
    /// Sets the slot size in bytes (must be > 0).
    pub fn max_payload(mut self, bytes: u32) -> Self {
        self.cfg.max_payload = bytes;
        self
    }
    /// Sets the slot count (1..=32768).
    pub fn rx_queue_depth(mut self, depth: u32) -> Self {
        self.cfg.rx_queue_depth = depth;
        self
    }
    /// Checks every field, in this order: device non-empty, port >= 1,
    /// payload > 0, depth 1..=32768, depth x payload < 2^32 bytes. The first
    /// rule broken is the error.
    pub fn build(self) -> Result<ServerConfig, InvalidValue> {
        self.cfg.validate()?;
        Ok(self.cfg)
    }
}

/// The transport knobs handed to `complete_connection` (and to the FPGA).
///
/// `rnr_retry` and `retry_count` only matter on the FPGA's (sending) side; the
/// host QP uses §1's fixed values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct TransportConfig {
    pmtu: Mtu,
    min_rnr_timer: RnrTimer,
    rnr_retry: u8,
    retry_count: u8,
}

impl Default for TransportConfig {
    /// pmtu 4096, min RNR timer code 12 (0.64 ms), rnr retry 7 (forever),
    /// retry count 3.
    fn default() -> Self {
        TransportConfig { pmtu: Mtu::Mtu4096, min_rnr_timer: RnrTimer::default(), rnr_retry: 7, retry_count: 3 }
    }
}

impl TransportConfig {
    /// Checks `rnr_retry` and `retry_count` (0..=7); `Mtu` and `RnrTimer` are
    /// valid by construction.
    pub fn new(pmtu: Mtu, min_rnr_timer: RnrTimer, rnr_retry: u8, retry_count: u8) -> Result<Self, InvalidValue> {
        if rnr_retry > 7 {
            return Err(InvalidValue::new("rnr_retry", rnr_retry as u64, "must be 0..=7 (7 = forever)"));
        }
        if retry_count > 7 {
            return Err(InvalidValue::new("retry_count", retry_count as u64, "must be 0..=7"));
        }
        Ok(TransportConfig { pmtu, min_rnr_timer, rnr_retry, retry_count })
    }

    /// From the raw codes rogue takes: pmtu 1..=5, RNR timer 0..=31, retries
    /// 0..=7.
    pub fn from_codes(pmtu: u8, min_rnr_timer: u8, rnr_retry: u8, retry_count: u8) -> Result<Self, InvalidValue> {
        TransportConfig::new(Mtu::from_code(pmtu)?, RnrTimer::from_code(min_rnr_timer)?, rnr_retry, retry_count)
    }

    /// The path MTU asked for (default 4096); the host QP uses the smaller of
    /// this and the port's active MTU (see `RoceServer::path_mtu`).
    pub fn pmtu(&self) -> Mtu {
        self.pmtu
    }
    /// The host QP's min RNR timer (default code 12, 0.64 ms): how long the
    /// FPGA waits after an RNR NAK before it sends again.
    pub fn min_rnr_timer(&self) -> RnrTimer {
        self.min_rnr_timer
    }
    /// RNR retries for the FPGA's QP, 0..=7 (default 7 = forever).
    pub fn rnr_retry(&self) -> u8 {
        self.rnr_retry
    }
    /// Transport retries for the FPGA's QP, 0..=7 (default 3).
    pub fn retry_count(&self) -> u8 {
        self.retry_count
    }
}

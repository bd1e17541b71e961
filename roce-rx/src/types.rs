//! The values the receive server takes and hands out: its error, the
//! host parameters, frames and their channels, counters and status.

use std::fmt;
use std::net::Ipv4Addr;

use thiserror::Error;

use crate::transport::{Gid, InvalidValue, Psn, Qpn, TransportError};

/// Errors of the receive server.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RoceError {
    /// A configuration value or argument broke a rule: also an `fpga_qpn`
    /// above 24 bits, or a queue depth above the device's `max_qp_wr` or
    /// `max_cqe`.
    #[error("invalid configuration: {0}")]
    Config(#[from] InvalidValue),
    /// A transport call failed; the error names the verb.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The transport drives another device than the configuration names.
    #[error("the transport drives device {actual:?}, the configuration names {configured:?}")]
    DeviceMismatch {
        /// The device the configuration names.
        configured: String,
        /// The device the transport drives.
        actual: String,
    },
    /// [`GidIndex::Auto`](crate::GidIndex::Auto) found no RoCE v2
    /// IPv4-mapped GID on the FPGA's /24.
    #[error("no RoCE v2 IPv4 GID on the /24 of {fpga_ip} in the GID table of port {port}")]
    NoGid {
        /// The FPGA address whose /24 was searched for.
        fpga_ip: Ipv4Addr,
        /// The port whose GID table was searched.
        port: u8,
    },
    /// The GID at the chosen index is all zeros or absent (an unused slot).
    #[error("GID index {index} of port {port} is all zeros (unused slot)")]
    ZeroGid {
        /// The GID index.
        index: u32,
        /// The port whose GID table it indexes.
        port: u8,
    },
    /// `complete_connection` was called before, successfully or not.
    #[error("complete_connection was already called")]
    AlreadyConnected,
    /// `poll` (or a call built on it) before `complete_connection`.
    #[error("the connection is not complete yet")]
    NotConnected,
    /// The call needs a running server, and `stop` has run.
    #[error("the server is stopped")]
    Stopped,
    /// A channel id above 255 (`Channel::new`).
    #[error("channel {0} is out of range: channels are 0..=255")]
    ChannelOutOfRange(u32),
    /// The frame handle is another server's, was already released, or its
    /// slab was freed.
    #[error("frame (slot {slot}) does not belong to this server or was already released")]
    ForeignFrame {
        /// The frame's receive slot.
        slot: u32,
    },
}

/// What the FPGA engine needs from the host (rogue `getHostParams`), plus the
/// rkey for engines that write rather than send.
// Not non_exhaustive: mirrors rogue's host parameters, which the hand-off
// carries field by field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostParams {
    /// The host QP's number: the FPGA's RTR dest QPN.
    pub qpn: Qpn,
    /// The FPGA's RTR `rq_psn`.
    pub rq_psn: Psn,
    /// The FPGA's RTS `sq_psn` (and what the host expects first).
    pub sq_psn: Psn,
    /// The receive slab's address, as registered.
    pub mr_addr: u64,
    /// The slab's length in bytes: depth x max payload.
    pub mr_len: u64,
    /// The slab's rkey, for engines that RDMA WRITE rather than SEND.
    pub rkey: u32,
}

/// A received frame: a zero-copy handle on one slot of the receive slab.
///
/// Read its bytes with
/// [`RoceServer::with_frame_data`](crate::RoceServer::with_frame_data) or
/// [`RoceServer::frame_data`](crate::RoceServer::frame_data); give it back
/// with [`RoceServer::release`](crate::RoceServer::release),
/// which re-posts the slot. It is neither `Clone` nor `Copy`, so a slot cannot
/// be released twice. A frame that is dropped instead of released keeps its
/// slot out of the receive queue for the server's lifetime (the FPGA then
/// sees one slot fewer of credit), hence `#[must_use]`.
#[must_use = "a frame's slot is re-posted only by RoceServer::release"]
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub(crate) slot: u32,
    pub(crate) channel: u8,
    pub(crate) ring_position: u32,
    pub(crate) len: u32,
    /// The slab's MR id and rkey and the host QPN: tell frames of different
    /// servers apart (best effort: handles are not globally unique).
    pub(crate) owner: (u32, u32, u32),
}

impl Frame {
    /// The receive slot (the WR id) holding the data.
    pub fn slot(&self) -> u32 {
        self.slot
    }
    /// The channel: immediate bits 7:0.
    pub fn channel(&self) -> u8 {
        self.channel
    }
    /// The FPGA's ring position: immediate bits 31:8 (informational).
    pub fn ring_position(&self) -> u32 {
        self.ring_position
    }
    /// The frame's length in bytes, 1..=max payload.
    pub fn len(&self) -> u32 {
        self.len
    }
    /// Always false for a delivered frame: a length-0 completion is not a
    /// frame (it counts in `bad_length`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A channel id checked to be 0..=255 (rogue `getChannel`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Channel(u8);

impl Channel {
    /// The channel `channel`; `ChannelOutOfRange` above 255.
    pub fn new(channel: u32) -> Result<Self, RoceError> {
        u8::try_from(channel).map(Channel).map_err(|_| RoceError::ChannelOutOfRange(channel))
    }
    /// The channel id, 0..=255.
    pub fn get(self) -> u8 {
        self.0
    }
}

/// Counters of the receive path. Every completion lands in exactly one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxCounters {
    /// Good frames delivered downstream.
    pub frames: u64,
    /// Bytes of those frames.
    pub bytes: u64,
    /// wr_id not a slot: dropped (warned in rogue).
    pub bad_wr_id: u64,
    /// Completions with an error status other than WR_FLUSH_ERR (re-posted).
    pub errors: u64,
    /// WR_FLUSH_ERR completions (the QP is shutting down).
    pub flushed: u64,
    /// Completions that were not RECV with immediate (re-posted).
    pub wrong_opcode: u64,
    /// Length 0 or above max payload (re-posted).
    pub bad_length: u64,
    /// Frames released by a channel view because they were on another channel.
    pub filtered_out: u64,
}

/// The 15 status fields of rogue's `RoCEv2Server`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// FpgaIp: the configured FPGA address.
    pub fpga_ip: Ipv4Addr,
    /// FpgaGid: the FPGA's IPv4-mapped GID.
    pub fpga_gid: Gid,
    /// HostQpn: the host QP's number.
    pub host_qpn: Qpn,
    /// HostGid: the GID at the host's source GID index.
    pub host_gid: Gid,
    /// HostIp: the host GID's IPv4 address, when it is IPv4-mapped.
    pub host_ip: Option<Ipv4Addr>,
    /// MrAddr: the receive slab's address.
    pub mr_addr: u64,
    /// MrRkey: the slab's rkey.
    pub mr_rkey: u32,
    /// RxFrameCount: good frames delivered so far.
    pub rx_frame_count: u64,
    /// RxByteCount: bytes of those frames.
    pub rx_byte_count: u64,
    /// MaxPayload: bytes per receive slot.
    pub max_payload: u32,
    /// RxQueueDepth: receive slots.
    pub rx_queue_depth: u32,
    /// HostRqPsn: handed to the FPGA as its RTR `rq_psn`.
    pub host_rq_psn: Psn,
    /// HostSqPsn: the FPGA's RTS `sq_psn`, and the host QP's RTR `rq_psn` and
    /// RTS `sq_psn`.
    pub host_sq_psn: Psn,
    /// `None` until `complete_connection`.
    pub fpga_qpn: Option<Qpn>,
    /// FpgaLkey: the FPGA's lkey from `complete_connection`; `None` until then.
    pub fpga_lkey: Option<u32>,
}

impl fmt::Display for Status {
    /// The connection summary (rogue `printConnInfo`): one `Name : value` line
    /// per field, GIDs as 8 groups of 4 lowercase hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn opt<T: fmt::Display>(v: Option<T>) -> String {
            v.map_or_else(|| "-".to_string(), |v| v.to_string())
        }
        writeln!(f, "FpgaIp       : {}", self.fpga_ip)?;
        writeln!(f, "FpgaGid      : {}", self.fpga_gid)?;
        writeln!(f, "HostQpn      : {:#08x}", self.host_qpn)?;
        writeln!(f, "HostGid      : {}", self.host_gid)?;
        writeln!(f, "HostIp       : {}", opt(self.host_ip))?;
        writeln!(f, "MrAddr       : {:#018x}", self.mr_addr)?;
        writeln!(f, "MrRkey       : {:#010x}", self.mr_rkey)?;
        writeln!(f, "RxFrameCount : {}", self.rx_frame_count)?;
        writeln!(f, "RxByteCount  : {}", self.rx_byte_count)?;
        writeln!(f, "MaxPayload   : {}", self.max_payload)?;
        writeln!(f, "RxQueueDepth : {}", self.rx_queue_depth)?;
        writeln!(f, "HostRqPsn    : {:#08x}", self.host_rq_psn.get())?;
        writeln!(f, "HostSqPsn    : {:#08x}", self.host_sq_psn.get())?;
        writeln!(f, "FpgaQpn      : {}", opt(self.fpga_qpn.map(|q| format!("{q:#08x}"))))?;
        writeln!(f, "FpgaLkey     : {}", opt(self.fpga_lkey.map(|k| format!("{k:#010x}"))))
    }
}

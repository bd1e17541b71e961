//! RoCEv2 framing: Ethernet / IPv4 / UDP 4791 / BTH / extended headers /
//! payload / pad / ICRC.
//!
//! - [`RoceFrame::decode`] / [`RoceFrame::decode_ip_packet`] parse a frame
//!   without copying; [`RoceFrame::encode`] gives the same bytes back.
//! - [`FrameBuilder`] builds frames from scratch with correct lengths,
//!   checksum and ICRC.
//! - Each header also decodes and encodes on its own (`Bth::decode`,
//!   `Reth::split`, `Ipv4Header::encode`, ...). Every failure is a
//!   [`RoceError`] naming the header, field and rule; no input panics.

mod builder;
mod codec;
mod error;
mod eth;
mod ext;
mod frame;
mod headers;
mod icrc;
mod ipv4;
mod udp;

pub use builder::FrameBuilder;
pub use codec::{IETH_LEN, split_ieth, split_immdt};
pub use error::{NotRoce, RoceError};
pub use eth::*;
pub use ext::{ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, AtomicAckEth, AtomicEth, ExtHeaders};
pub use frame::RoceFrame;
pub use headers::*;
pub use icrc::{icrc_ipv4, icrc_on_wire};
pub use ipv4::{
    IP_PROTO_UDP, IPV4_DF, IPV4_MAX_HEADER_LEN, IPV4_MF, IPV4_MIN_HEADER_LEN, Ipv4Header, Ipv4Options, ipv4_checksum,
};
pub use udp::{UDP_HEADER_LEN, UdpHeader};

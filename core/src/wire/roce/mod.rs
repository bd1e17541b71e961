//! RoCEv2 framing: Ethernet / IPv4 / UDP 4791 / BTH / extended headers /
//! payload / pad / ICRC.

mod headers;

pub use headers::*;

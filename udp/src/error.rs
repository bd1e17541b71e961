//! Errors setting up an endpoint.

use std::io;
use std::net::SocketAddrV4;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum UdpError {
    #[error("udp endpoint: {field}: {rule}")]
    Config { field: &'static str, rule: &'static str },
    #[error("udp endpoint: cannot bind {addr} (is the port taken, e.g. by rxe in this network namespace?): {source}")]
    Bind {
        addr: SocketAddrV4,
        #[source]
        source: io::Error,
    },
    #[error("udp endpoint: {what}: {source}")]
    Socket {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("udp endpoint: network namespace {path}: {what}: {source}")]
    Netns {
        path: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// Another endpoint of the same reactor has this name or address (one
    /// reactor routes frames by address).
    #[error("udp endpoint: {field} {value} is already used by another endpoint of this reactor")]
    InUse { field: &'static str, value: String },
}

//! Errors setting up an endpoint.

use std::io;
use std::net::SocketAddrV4;

use thiserror::Error;

/// Why an endpoint could not be set up; each names the field or the call.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum UdpError {
    /// A configuration value broke its rule.
    #[error("udp endpoint: {field}: {rule}")]
    Config {
        /// The [`UdpConfig`](crate::UdpConfig) field.
        field: &'static str,
        /// What it must be.
        rule: &'static str,
    },
    /// The socket could not be bound.
    #[error("udp endpoint: cannot bind {addr} (is the port taken, e.g. by rxe in this network namespace?): {source}")]
    Bind {
        /// The address and port asked for.
        addr: SocketAddrV4,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A socket call failed.
    #[error("udp endpoint: {what}: {source}")]
    Socket {
        /// The call and what it was for.
        what: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// Entering or leaving a network namespace failed.
    #[error("udp endpoint: network namespace {path}: {what}: {source}")]
    Netns {
        /// The namespace's path (`/run/netns/NAME`).
        path: String,
        /// The step that failed.
        what: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// Another endpoint of the same reactor has this name or address (one
    /// reactor routes frames by address).
    #[error("udp endpoint: {field} {value} is already used by another endpoint of this reactor")]
    InUse {
        /// `name` or `ip`.
        field: &'static str,
        /// The value taken.
        value: String,
    },
}

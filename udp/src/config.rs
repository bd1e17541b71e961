//! What an endpoint is: its address and port, MTU, seed, how it receives,
//! and an optional drop hook.

use std::fmt;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use rctb_core::transport::Mtu;
use rctb_core::wire::roce::ROCEV2_UDP_PORT;
use rctb_engine::Packet;

use crate::rng::ChildRng;

/// How received frames are read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RawRx {
    /// A raw IPv4/UDP socket beside the UDP socket when the process may open
    /// one (CAP_NET_RAW), else the UDP socket alone.
    #[default]
    Auto,
    /// The raw socket or nothing: setup fails without CAP_NET_RAW.
    Required,
    /// The UDP socket alone. The IPv4 header is then rebuilt from what the
    /// socket reports (addresses, ports, length) and the rules this backend
    /// sends by (IP ID 0, DF): frames from senders that use other IP IDs
    /// (kernel rxe does) fail the ICRC check and are dropped.
    Off,
}

/// Which way a packet is going, for the drop hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// Leaving the endpoint, before the socket.
    Tx,
    /// Arriving, after the ICRC check.
    Rx,
}

/// What becomes of a packet on the UDP path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Goes on as it is.
    Pass,
    /// Lost.
    Drop,
    /// Delivered (sent, or handed to the RC engine) twice.
    Duplicate,
    /// Delivered this much later (packets after it may pass it).
    Delay(Duration),
}

/// Decides each packet's [`Fate`] on the way out ([`Dir::Tx`], before the
/// socket) and in ([`Dir::Rx`], after the ICRC check).
pub type PathHook = Box<dyn FnMut(Dir, &Packet) -> Fate + Send>;

/// One UDP endpoint.
#[non_exhaustive]
pub struct UdpConfig {
    /// Names the endpoint (its device is `udp-NAME`).
    pub name: String,
    /// The local address to bind; a specific address, not 0.0.0.0 (it is
    /// the source of every frame and the IPv4-mapped GID).
    pub ip: Ipv4Addr,
    /// The local UDP port (RoCEv2: 4791).
    pub port: u16,
    /// The UDP port peers listen on (RoCEv2: 4791). Another value lets two
    /// endpoints share an address in tests; a real RoCEv2 peer needs 4791.
    pub peer_port: u16,
    /// The port's active MTU (rxe on a 1500-byte link: 1024).
    pub mtu: Mtu,
    /// Seeds memory keys and the PSNs of CM connects; `None` draws one from
    /// the clock and the process id.
    pub seed: Option<u64>,
    /// How frames are received: from the UDP socket, or a raw socket that
    /// sees the sender's real IPv4 header ([`RawRx`]).
    pub raw_rx: RawRx,
    /// Socket buffer size asked for (SO_RCVBUFFORCE when privileged, else
    /// SO_RCVBUF, which the kernel caps at net.core.rmem_max).
    pub socket_buffer: usize,
    /// Loses or duplicates packets on the way out or in (tests of
    /// recovery); [`UdpTransport::set_hook`](crate::UdpTransport::set_hook)
    /// changes it later.
    pub hook: Option<PathHook>,
    /// The network namespace the sockets live in: a name (`ip netns add
    /// NAME`, i.e. `/run/netns/NAME`) or a path (`/proc/PID/ns/net`).
    /// `None`: the caller's. The thread enters it only while opening the
    /// sockets (CAP_SYS_ADMIN), so one process can have endpoints in several
    /// namespaces, joined by whatever links them (a veth pair, tc netem).
    pub netns: Option<PathBuf>,
}

impl fmt::Debug for UdpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpConfig")
            .field("name", &self.name)
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("peer_port", &self.peer_port)
            .field("mtu", &self.mtu)
            .field("seed", &self.seed)
            .field("raw_rx", &self.raw_rx)
            .field("socket_buffer", &self.socket_buffer)
            .field("hook", &self.hook.as_ref().map(|_| "set"))
            .field("netns", &self.netns)
            .finish()
    }
}

impl UdpConfig {
    /// An endpoint on `ip`:4791 talking to peers on 4791, MTU 4096.
    pub fn new(name: impl Into<String>, ip: Ipv4Addr) -> Self {
        UdpConfig {
            name: name.into(),
            ip,
            port: ROCEV2_UDP_PORT,
            peer_port: ROCEV2_UDP_PORT,
            mtu: Mtu::Mtu4096,
            seed: None,
            raw_rx: RawRx::Auto,
            socket_buffer: 8 << 20,
            hook: None,
            netns: None,
        }
    }

    /// Loses each packet with probability `tx` on the way out and `rx` on
    /// the way in, drawn from `seed` (the same seed loses the same packet
    /// numbers).
    pub fn with_loss(mut self, tx: f64, rx: f64, seed: u64) -> Self {
        let mut rng = ChildRng::child(seed, &format!("udp-loss/{}", self.name));
        self.hook = Some(Box::new(move |dir, _| match rng.chance(if dir == Dir::Tx { tx } else { rx }) {
            true => Fate::Drop,
            false => Fate::Pass,
        }));
        self
    }
}

//! The sockets of one endpoint: a UDP socket bound to address:port (it
//! owns the port and is what sends), and, when permitted, a raw IPv4/UDP
//! socket bound to the same address that shows received frames with their
//! IPv4 header, so the ICRC can be checked over the header the sender's
//! kernel wrote.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::io::Errno;
use rustix::net::{self, AddressFamily, SocketFlags, SocketType, ipproto, sockopt};
use rustix::thread::{LinkNameSpaceType, move_into_link_name_space};

use crate::config::{RawRx, UdpConfig};
use crate::error::UdpError;

#[derive(Debug)]
pub(crate) struct Sockets {
    pub udp: UdpSocket,
    pub raw: Option<OwnedFd>,
}

/// Asks for `size` bytes of receive and send buffer: forced when the
/// process may (CAP_NET_ADMIN), else as much as net.core.[rw]mem_max allow.
fn buffers(fd: BorrowedFd<'_>, size: usize, send: bool) {
    if sockopt::set_socket_recv_buffer_size_force(fd, size).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(fd, size);
    }
    if send && sockopt::set_socket_send_buffer_size_force(fd, size).is_err() {
        let _ = sockopt::set_socket_send_buffer_size(fd, size);
    }
}

/// The calling thread inside another network namespace until
/// [`leave`](Netns::leave) (or drop) puts it back where it was.
struct Netns {
    home: Option<std::fs::File>,
}

impl Netns {
    fn enter(ns: &Path) -> Result<Netns, UdpError> {
        let path = if ns.components().count() == 1 { Path::new("/run/netns").join(ns) } else { ns.to_path_buf() };
        let err = |what: &'static str| move |source: io::Error| UdpError::Netns { path: path_of(ns), what, source };
        let home = std::fs::File::open("/proc/thread-self/ns/net").map_err(err("open the current namespace"))?;
        let target = std::fs::File::open(&path).map_err(err("open"))?;
        move_into_link_name_space(target.as_fd(), Some(LinkNameSpaceType::Network))
            .map_err(|e| err("enter (setns, needs CAP_SYS_ADMIN)")(e.into()))?;
        Ok(Netns { home: Some(home) })
    }

    fn leave(mut self) -> Result<(), UdpError> {
        let Some(home) = self.home.take() else { return Ok(()) };
        move_into_link_name_space(home.as_fd(), Some(LinkNameSpaceType::Network)).map_err(|e| UdpError::Netns {
            path: "/proc/thread-self/ns/net".into(),
            what: "return to the thread's namespace",
            source: e.into(),
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Some(home) = self.home.take() {
            let _ = move_into_link_name_space(home.as_fd(), Some(LinkNameSpaceType::Network));
        }
    }
}

fn path_of(p: &Path) -> String {
    p.display().to_string()
}

impl Sockets {
    /// Opens the endpoint's sockets, inside `cfg.netns` when given.
    pub fn open(cfg: &UdpConfig) -> Result<Self, UdpError> {
        let Some(ns) = &cfg.netns else { return Self::open_here(cfg) };
        let inside = Netns::enter(ns)?;
        let r = Self::open_here(cfg);
        inside.leave()?;
        r
    }

    fn open_here(cfg: &UdpConfig) -> Result<Self, UdpError> {
        if cfg.ip.is_unspecified() || cfg.ip.is_broadcast() || cfg.ip.is_multicast() {
            return Err(UdpError::Config { field: "ip", rule: "must be one unicast address of this host" });
        }
        if cfg.port == 0 || cfg.peer_port == 0 {
            return Err(UdpError::Config { field: "port", rule: "ports must be 1..=65535" });
        }
        let addr = SocketAddrV4::new(cfg.ip, cfg.port);
        let udp = UdpSocket::bind(addr).map_err(|source| UdpError::Bind { addr, source })?;
        let os = |what: &'static str| move |e: io::Error| UdpError::Socket { what, source: e };
        udp.set_nonblocking(true).map_err(os("O_NONBLOCK"))?;
        // IP ID 0 with DF on every datagram: the ICRC covers the IP ID, and
        // the kernel gives unconnected DF sockets ID 0.
        sockopt::set_ip_mtu_discover(&udp, sockopt::Ipv4PathMtuDiscovery::DO)
            .map_err(|e| os("IP_MTU_DISCOVER")(e.into()))?;
        buffers(udp.as_fd(), cfg.socket_buffer, true);
        let raw = match cfg.raw_rx {
            RawRx::Off => None,
            mode => match open_raw(cfg.ip, cfg.socket_buffer) {
                Ok(fd) => Some(fd),
                Err(e) if mode == RawRx::Auto && (e == Errno::PERM || e == Errno::ACCESS) => None,
                Err(e) => return Err(UdpError::Socket { what: "raw IPv4/UDP socket", source: e.into() }),
            },
        };
        if raw.is_some() {
            // Frames are read from the raw socket; the UDP socket only owns
            // the port. Keep what piles up there small.
            let _ = sockopt::set_socket_recv_buffer_size(&udp, 0);
        }
        Ok(Sockets { udp, raw })
    }

    /// The descriptor to poll for received frames.
    pub fn rx_fd(&self) -> BorrowedFd<'_> {
        match &self.raw {
            Some(raw) => raw.as_fd(),
            None => self.udp.as_fd(),
        }
    }
}

fn open_raw(ip: Ipv4Addr, size: usize) -> Result<OwnedFd, Errno> {
    let fd = net::socket_with(
        AddressFamily::INET,
        SocketType::RAW,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        Some(ipproto::UDP),
    )?;
    // Bound to our address: the kernel hands it only packets sent to it.
    net::bind(&fd, &SocketAddrV4::new(ip, 0))?;
    buffers(fd.as_fd(), size, false);
    Ok(fd)
}

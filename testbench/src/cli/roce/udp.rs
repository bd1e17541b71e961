//! The udp backend of `rctb roce-rx` and `rctb fpga-emu` (rctb-udp): either
//! side is a UDP endpoint on `--device ADDR[:PORT]` (port 4791 by default)
//! instead of an RDMA device, so a software FPGA streams into a real NIC
//! (`fpga-emu --backend udp` to `roce-rx --backend verbs` on rxe), or both
//! sides run on a machine with no RDMA at all. The front ends are
//! `super::front`; the connection is the same hand-off.

use std::net::SocketAddrV4;

use rctb_core::Transport;
use rctb_core::roce::GidIndex;
use rctb_core::transport::{Gid, InvalidValue, Mtu};
use rctb_udp::{UdpReactor, UdpTransport};

use super::args::*;
use super::front;
use crate::cli::backend;

/// `ADDR` or `ADDR:PORT`.
fn endpoint(device: Option<&str>, what: &str) -> Result<SocketAddrV4, CliError> {
    let d = device.ok_or_else(|| {
        CliError::Usage(format!("--backend udp needs --device: the {what} UDP endpoint's IPv4 address[:port]"))
    })?;
    backend::Endpoint::udp(d)
        .ok_or_else(|| CliError::Usage(format!("--device {d:?}: with --backend udp, an IPv4 address or ADDR:PORT")))
}

fn bind(name: &str, at: SocketAddrV4, pmtu: u32) -> Result<UdpTransport, CliError> {
    let mtu = Mtu::from_bytes(pmtu)
        .map_err(|_| InvalidValue::new("pmtu", pmtu as u64, "must be 256, 512, 1024, 2048 or 4096"))?;
    UdpTransport::bind(backend::udp_config(name, at, mtu)).map_err(|e| CliError::Usage(e.to_string()))
}

/// The endpoint's IPv4-mapped GID index (what `auto` means here), or the one given.
fn gid_index(t: &UdpTransport, at: SocketAddrV4, given: GidIndex) -> Result<u32, CliError> {
    if let GidIndex::Index(i) = given {
        return Ok(i);
    }
    let own = Gid::from_ipv4(*at.ip());
    t.port(1)?
        .gids
        .iter()
        .find(|g| g.gid == own)
        .map(|g| g.index)
        .ok_or_else(|| CliError::Gid(format!("udp endpoint {at}: no IPv4-mapped GID")))
}

/// One line of what the endpoint's RC engine sent and its socket received.
fn summary(cmd: &str, at: SocketAddrV4, reactor: &UdpReactor) -> String {
    let e = reactor.engine_stats();
    let s = reactor.endpoint_stats().first().copied().unwrap_or_default();
    format!(
        "{cmd}: udp {at}: sent {} frames ({} ACKs, {} RNR NAKs, {} PSN sequence NAKs, {} retransmitted, {} ACK \
         timeouts); received {} frames ({} ACKs, {} RNR NAKs, {} PSN sequence NAKs); dropped {} bad ICRC, {} \
         malformed, {} unsupported",
        e.frames_sent,
        e.acks,
        e.rnr_naks,
        e.seq_naks,
        e.retransmitted,
        e.timeouts,
        s.rx_frames,
        s.rx_acks,
        s.rx_naks_rnr,
        s.rx_naks_seq,
        s.rx_bad_icrc,
        s.rx_malformed,
        s.rx_unsupported
    )
}

fn say(to_stderr: bool, line: &str) {
    if to_stderr {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
}

/// `rctb roce-rx --backend udp`.
pub fn roce_rx(a: &RoceRxArgs) -> Result<bool, CliError> {
    let fpga_ip = a.fpga_ip.ok_or_else(|| CliError::Usage("--backend udp needs --fpga-ip".into()))?;
    let at = endpoint(a.device.as_deref(), "host's")?;
    let t = bind("host", at, a.pmtu)?;
    let gid = gid_index(&t, at, a.gid_index)?;
    let device = t.device()?.name;
    let reactor = t.reactor();
    let r = front::roce_rx(t, &device, GidIndex::Index(gid), fpga_ip, a);
    say(a.host_params == "-", &summary("roce-rx", at, &reactor));
    r
}

/// `rctb fpga-emu --backend udp`.
pub fn fpga_emu(a: &FpgaEmuArgs) -> Result<bool, CliError> {
    let host_ip = a.host_ip.ok_or_else(|| CliError::Usage("--backend udp needs --host-ip".into()))?;
    let at = endpoint(a.device.as_deref(), "FPGA's")?;
    let t = bind("fpga", at, a.pmtu)?;
    let sgid = gid_index(&t, at, a.gid_index)?;
    let device = t.device()?.name;
    let reactor = t.reactor();
    let r = front::fpga_emu(t, &device, sgid, host_ip, a);
    say(a.fpga_params == "-", &summary("fpga-emu", at, &reactor));
    r
}

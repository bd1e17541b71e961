//! `rctb conformance --backend udp`: the conformance suite with at least
//! one endpoint on the udp backend (rctb-udp).
//!
//! `--device` (requester) and `--peer` (responder) each name an endpoint:
//! an IPv4 address, or `ADDR:PORT`, is a UDP endpoint bound there; anything
//! else is an RDMA device opened with verbs (a build with `--features
//! verbs`), so `--device 10.10.2.2 --peer rxe2` runs the suite from this
//! backend against kernel rxe and `--device rxe2 --peer 10.10.2.2` the other
//! way. Two UDP endpoints share one reactor. RDMA CM is not carried over
//! UDP: the `cm/` cases are skipped.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;

use rctb::conformance::{self, CaseResult};
use rctb_core::Transport;
use rctb_core::transport::Mtu;
use rctb_udp::{UdpConfig, UdpReactor, UdpTransport};

enum Spec {
    Udp(SocketAddrV4),
    Device(String),
}

fn spec(s: &str) -> Spec {
    if let Ok(a) = s.parse::<SocketAddrV4>() {
        return Spec::Udp(a);
    }
    match s.parse::<Ipv4Addr>() {
        Ok(ip) => Spec::Udp(SocketAddrV4::new(ip, rctb_core::wire::roce::ROCEV2_UDP_PORT)),
        Err(_) => Spec::Device(s.to_string()),
    }
}

fn bind(reactor: &UdpReactor, name: &str, at: SocketAddrV4, mtu: Mtu) -> Result<UdpTransport, ExitCode> {
    let cfg = UdpConfig { mtu, port: at.port(), peer_port: at.port(), ..UdpConfig::new(name, *at.ip()) };
    reactor.endpoint(cfg).map_err(|e| {
        eprintln!("rctb: {e}");
        ExitCode::from(2)
    })
}

fn report<T: Transport>(a: &mut T, b: &mut T, filter: &str) -> ExitCode {
    let mut skipped = 0;
    for (name, _) in conformance::cases::<T>() {
        if name.contains(filter) && name.starts_with("cm/") {
            println!("SKIP {name} (RDMA CM is not carried over UDP)");
            skipped += 1;
        }
    }
    let select = |name: &str| name.contains(filter) && !name.starts_with("cm/");
    let results = conformance::run_selected(a, b, &select, &mut |r: &CaseResult| println!("{}", r.line()));
    let failed = results.iter().filter(|r| !r.passed()).count();
    println!("conformance: {} passed, {} failed, {} skipped", results.len() - failed, failed, skipped);
    if results.is_empty() {
        eprintln!("rctb: no conformance case matches {filter:?} on the udp backend");
        return ExitCode::from(2);
    }
    if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

pub fn conformance(device: Option<&str>, peer: Option<&str>, mtu: u32, filter: &str) -> ExitCode {
    let mtu = match Mtu::from_bytes(mtu) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("rctb: --mtu: {e}");
            return ExitCode::from(2);
        }
    };
    let (a, b) = (spec(device.unwrap_or("127.0.0.2")), spec(peer.unwrap_or("127.0.0.1")));
    let reactor = UdpReactor::new(None);
    match (a, b) {
        (Spec::Udp(x), Spec::Udp(y)) => {
            let (mut a, mut b) = match (bind(&reactor, "udp1", x, mtu), bind(&reactor, "udp0", y, mtu)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(code), _) | (_, Err(code)) => return code,
            };
            let code = report(&mut a, &mut b, filter);
            eprintln!("rctb: udp {x}: {:?}\nrctb: udp {y}: {:?}", a.stats(), b.stats());
            code
        }
        (Spec::Device(_), Spec::Device(_)) => {
            eprintln!("rctb: --backend udp needs a UDP endpoint (an IPv4 address) on at least one side");
            ExitCode::from(2)
        }
        (Spec::Udp(x), Spec::Device(d)) => mixed(&reactor, x, &d, mtu, true, filter),
        (Spec::Device(d), Spec::Udp(x)) => mixed(&reactor, x, &d, mtu, false, filter),
    }
}

#[cfg(feature = "verbs")]
fn mixed(reactor: &UdpReactor, at: SocketAddrV4, device: &str, mtu: Mtu, udp_requests: bool, filter: &str) -> ExitCode {
    use rctb_udp::mixed::{Driven, Either};
    let udp = match bind(reactor, "udp", at, mtu) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let verbs = match rctb_hw::VerbsTransport::open(device) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rctb: opening {device}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut u: Either<UdpTransport, Driven<rctb_hw::VerbsTransport>> = Either::A(udp);
    let mut v = Either::B(Driven::new(verbs, reactor.clone()));
    let code = if udp_requests { report(&mut u, &mut v, filter) } else { report(&mut v, &mut u, filter) };
    if let Either::A(t) = &u {
        eprintln!("rctb: udp {at}: {:?}", t.stats());
    }
    code
}

#[cfg(not(feature = "verbs"))]
fn mixed(_: &UdpReactor, _: SocketAddrV4, device: &str, _: Mtu, _: bool, _: &str) -> ExitCode {
    eprintln!(
        "rctb: {device:?} is not an IPv4 address, and this rctb was built without verbs support to open it as an \
         RDMA device (cargo build --release -p rctb --features verbs)"
    );
    ExitCode::from(2)
}

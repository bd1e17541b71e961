//! `rc-pingpong`: the library's two roles from the command line.
//!
//! ```text
//! rc-pingpong sim [-n COUNT] [--seed S] [--drop P]       both ends on the simulator
//! rc-pingpong server --backend udp|verbs --device DEV    the echo server (port 7471)
//! rc-pingpong client --backend udp|verbs --device DEV --peer ADDR [-n COUNT]
//! ```
//!
//! `--device` is an IPv4 address on udp (a UDP socket at port 4791 there)
//! and an RDMA device on verbs (`rxe0`; a build with `--features verbs`).
//! The client prints `rtt n=.. min=.. median=.. max=.. us`; the server
//! `LISTENING ADDR:7471`, then `ECHOED n` when `--for` ends.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rc_pingpong::{Echo, PORT, PingError, Pinger};
use rctb_core::Transport;
use rctb_core::time::{Duration, Instant};
use rctb_sim::{LinkConfig, NodeConfig, Sim, SimTransport};
use rctb_udp::{UdpConfig, UdpTransport};

#[derive(Debug, Parser)]
#[command(version, about = "An RC ping-pong written against rctb's Transport")]
struct Cli {
    #[command(subcommand)]
    role: Role,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Backend {
    Udp,
    Verbs,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// Both ends on rctb's simulator, in virtual time.
    Sim {
        #[arg(short = 'n', long, default_value_t = 1000)]
        count: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The share of packets each link loses.
        #[arg(long, default_value_t = 0.0)]
        drop: f64,
    },
    /// The echo server.
    Server {
        #[arg(long, value_enum)]
        backend: Backend,
        /// udp: the IPv4 address to bind; verbs: the RDMA device.
        #[arg(long)]
        device: String,
        /// Serve this long, then print what was echoed (default: until killed).
        #[arg(long = "for", value_name = "SECONDS")]
        serve_for: Option<f64>,
    },
    /// The client: pings the server and prints the round trips.
    Client {
        #[arg(long, value_enum)]
        backend: Backend,
        #[arg(long)]
        device: String,
        /// The server's IPv4 address.
        #[arg(long)]
        peer: Ipv4Addr,
        #[arg(short = 'n', long, default_value_t = 1000)]
        count: u64,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().role {
        Role::Sim { count, seed, drop } => sim(count, seed, drop),
        Role::Server { backend, device, serve_for } => {
            let serve_for = serve_for.map(Duration::from_secs_f64);
            with_backend(backend, &device, |t, ip| serve(t, ip, serve_for))
        }
        Role::Client { backend, device, peer, count, timeout } => with_backend(backend, &device, |t, _| {
            let mut p = Pinger::new(SocketAddrV4::new(peer, PORT), count);
            t.pinger_run(&mut p, Duration::from_secs(timeout)).map(|rtts| summary(&rtts)).map_err(|e| format!("{e:?}"))
        }),
    };
    match result {
        Ok(text) => {
            println!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rc-pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Opens the backend's transport and hands it, with its IPv4 address, to `f`.
fn with_backend(
    backend: Backend,
    device: &str,
    f: impl FnOnce(&mut dyn Runner, Ipv4Addr) -> Result<String, String>,
) -> Result<String, String> {
    match backend {
        Backend::Udp => {
            let ip: Ipv4Addr = device.parse().map_err(|_| format!("--device {device:?}: an IPv4 address on udp"))?;
            let mut t = UdpTransport::bind(UdpConfig::new("rc-pingpong", ip)).map_err(|e| e.to_string())?;
            f(&mut t, ip)
        }
        Backend::Verbs => verbs(device, f),
    }
}

#[cfg(feature = "verbs")]
fn verbs(device: &str, f: impl FnOnce(&mut dyn Runner, Ipv4Addr) -> Result<String, String>) -> Result<String, String> {
    let mut t = rctb_hw::VerbsTransport::open(device).map_err(|e| format!("opening {device}: {e}"))?;
    let port = t.port(1).map_err(|e| e.to_string())?;
    let ip = port.gids.iter().find_map(|g| g.gid.to_ipv4()).ok_or(format!("{device} has no IPv4 GID"))?;
    f(&mut t, ip)
}

#[cfg(not(feature = "verbs"))]
fn verbs(_: &str, _: impl FnOnce(&mut dyn Runner, Ipv4Addr) -> Result<String, String>) -> Result<String, String> {
    Err("built without verbs: apt-get install libibverbs-dev librdmacm-dev libclang-dev, then \
         cargo build --release -p rc-pingpong --features verbs"
        .into())
}

/// What the front end needs of a transport, object-safe: the roles' steps
/// are generic, so each backend gets its own copy of them behind this.
trait Runner {
    fn pinger_run(&mut self, p: &mut Pinger, timeout: Duration) -> Result<Vec<Duration>, PingError>;
    fn echo_step(&mut self, e: &mut Echo) -> Result<(), PingError>;
    fn wait_echo(&mut self, e: &Echo, until: Instant) -> Result<(), PingError>;
    fn now(&self) -> Instant;
}

impl<T: Transport> Runner for T {
    fn pinger_run(&mut self, p: &mut Pinger, timeout: Duration) -> Result<Vec<Duration>, PingError> {
        p.run(self, timeout).map(<[Duration]>::to_vec)
    }
    fn echo_step(&mut self, e: &mut Echo) -> Result<(), PingError> {
        e.step(self).map(|_| ())
    }
    fn wait_echo(&mut self, e: &Echo, until: Instant) -> Result<(), PingError> {
        let cqs: Vec<_> = e.cq().into_iter().collect();
        self.wait(&cqs, until)?;
        Ok(())
    }
    fn now(&self) -> Instant {
        Transport::now(self)
    }
}

fn serve(t: &mut dyn Runner, ip: Ipv4Addr, serve_for: Option<Duration>) -> Result<String, String> {
    let mut echo = Echo::default();
    t.echo_step(&mut echo).map_err(|e| format!("{e:?}"))?;
    println!("LISTENING {ip}:{PORT}");
    let end = serve_for.map(|d| t.now() + d);
    while end.is_none_or(|e| t.now() < e) {
        let until = (t.now() + Duration::from_secs(1)).min(end.unwrap_or(Instant::FAR_FUTURE));
        t.wait_echo(&echo, until).map_err(|e| format!("{e:?}"))?;
        t.echo_step(&mut echo).map_err(|e| format!("{e:?}"))?;
    }
    Ok(format!("ECHOED {}", echo.echoed))
}

fn sim(count: u64, seed: u64, drop: f64) -> Result<String, String> {
    let sim = Sim::new(seed);
    let c = sim.add_node(NodeConfig::new("client", Ipv4Addr::new(10, 0, 0, 1))).map_err(|e| e.to_string())?;
    let s = sim.add_node(NodeConfig::new("server", Ipv4Addr::new(10, 0, 0, 2))).map_err(|e| e.to_string())?;
    let mut link = LinkConfig::default();
    link.faults.drop = drop;
    sim.set_default_link(link);
    let mut echo = Echo::default();
    sim.add_actor(s, Box::new(move |t: &mut SimTransport| echo.step(t).expect("the echo server")));
    let mut p = Pinger::new(SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 2), PORT), count);
    let rtts = p.run(&mut sim.transport(c), Duration::from_secs(60)).map_err(|e| format!("{e:?} (seed {seed})"))?;
    Ok(summary(rtts))
}

/// `rtt n=.. min=.. median=.. max=.. us`.
fn summary(rtts: &[Duration]) -> String {
    let mut us: Vec<f64> = rtts.iter().map(|d| d.as_nanos() as f64 / 1000.0).collect();
    us.sort_by(f64::total_cmp);
    let at = |q: usize| us.get(q).copied().unwrap_or(0.0);
    format!(
        "rtt n={} min={:.2} median={:.2} max={:.2} us",
        us.len(),
        at(0),
        at(us.len() / 2),
        at(us.len().saturating_sub(1))
    )
}

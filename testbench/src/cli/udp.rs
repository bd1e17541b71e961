//! `rctb conformance --backend udp`: the conformance suite with at least
//! one endpoint on the udp backend (rctb-udp).
//!
//! `--device` (requester) and `--peer` (responder) each name an endpoint:
//! an IPv4 address, or `ADDR:PORT`, is a UDP endpoint bound there
//! (`ADDR@NETNS`: its sockets in that network namespace); anything
//! else is an RDMA device opened with verbs (a build with `--features
//! verbs`), so `--device 10.10.2.2 --peer rxe2` runs the suite from this
//! backend against kernel rxe and `--device rxe2 --peer 10.10.2.2` the other
//! way. Two UDP endpoints share one reactor. The `cm/` cases connect with
//! RDMA CM, whose MADs the udp backend carries on QP1 as rdma_cm does.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;

use rctb_conformance::{self as conformance, CaseResult};
use rctb_core::Transport;
use rctb_core::time::Duration;
use rctb_core::transport::{Access, Completion, CqId, Mtu, Readiness, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use rctb_udp::mixed::{Driven, Either};
use rctb_udp::{UdpReactor, UdpTransport};

use crate::cli::backend::{self, Endpoint};

fn bind(
    reactor: &UdpReactor,
    name: &str,
    at: SocketAddrV4,
    mtu: Mtu,
    netns: Option<PathBuf>,
) -> Result<UdpTransport, ExitCode> {
    let mut cfg = backend::udp_config(name, at, mtu);
    cfg.netns = netns;
    reactor.endpoint(cfg).map_err(|e| {
        eprintln!("rctb: {e}");
        ExitCode::from(2)
    })
}

/// Something to run between two endpoints of one transport type.
trait Job {
    /// `a` requests, `b` responds; a UDP endpoint is `Either::A`.
    fn run<O: Transport>(&self, a: &mut Either<UdpTransport, O>, b: &mut Either<UdpTransport, O>) -> ExitCode;
    /// Between two local addresses: what plain sockets do, for comparison.
    fn baseline(&self, _a: Ipv4Addr, _b: Ipv4Addr, _mtu: Mtu) {}
}

struct Conformance<'f> {
    filter: &'f str,
}

impl Job for Conformance<'_> {
    fn run<O: Transport>(&self, a: &mut Either<UdpTransport, O>, b: &mut Either<UdpTransport, O>) -> ExitCode {
        let filter = self.filter;
        let select = |name: &str| name.contains(filter);
        let mut results = conformance::run_selected(a, b, &select, &mut |r: &CaseResult| println!("{}", r.line()));
        results.extend(rctb_scenario::udp_faults::run(a, b, filter, &mut |r: &CaseResult| println!("{}", r.line())));
        let failed = results.iter().filter(|r| !r.passed()).count();
        println!("conformance: {} passed, {} failed", results.len() - failed, failed);
        if results.is_empty() {
            eprintln!("rctb: no conformance case matches {filter:?} on the udp backend");
            return ExitCode::from(2);
        }
        if failed == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) }
    }
}

pub fn conformance(device: Option<&str>, peer: Option<&str>, mtu: u32, filter: &str) -> ExitCode {
    with_pair(device, peer, mtu, &Conformance { filter })
}

fn with_pair(device: Option<&str>, peer: Option<&str>, mtu: u32, job: &impl Job) -> ExitCode {
    let mtu = match Mtu::from_bytes(mtu) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("rctb: --mtu: {e}");
            return ExitCode::from(2);
        }
    };
    let (device, ns_a) = split_netns(device.unwrap_or("127.0.0.2"));
    let (peer, ns_b) = split_netns(peer.unwrap_or("127.0.0.1"));
    let (a, b) = (Endpoint::parse(device), Endpoint::parse(peer));
    let reactor = UdpReactor::new(None);
    match (a, b) {
        (Endpoint::Udp(x), Endpoint::Udp(y)) => {
            let (a, b) = match (bind(&reactor, "udp1", x, mtu, ns_a), bind(&reactor, "udp0", y, mtu, ns_b)) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(code), _) | (_, Err(code)) => return code,
            };
            let (mut a, mut b): (Either<_, UdpTransport>, _) = (Either::A(a), Either::A(b));
            let code = job.run(&mut a, &mut b);
            if let (Either::A(a), Either::A(b)) = (&a, &b) {
                eprintln!("rctb: udp {x}: {:?}\nrctb: udp {y}: {:?}", a.stats(), b.stats());
            }
            job.baseline(*x.ip(), *y.ip(), mtu);
            code
        }
        (Endpoint::Device(_), Endpoint::Device(_)) => {
            eprintln!("rctb: --backend udp needs a UDP endpoint (an IPv4 address) on at least one side");
            ExitCode::from(2)
        }
        (Endpoint::Udp(x), Endpoint::Device(d)) => mixed(&reactor, x, ns_a, &d, mtu, true, job),
        (Endpoint::Device(d), Endpoint::Udp(x)) => mixed(&reactor, x, ns_b, &d, mtu, false, job),
    }
}

/// `ADDR[:PORT]@NETNS`: a UDP endpoint whose sockets are opened in network
/// namespace NETNS (the process, and an RDMA device's rdma_cm, stay where
/// they are).
fn split_netns(text: &str) -> (&str, Option<PathBuf>) {
    match text.split_once('@') {
        Some((addr, ns)) if !ns.is_empty() => (addr, Some(PathBuf::from(ns))),
        _ => (text, None),
    }
}

/// One UDP endpoint at `at` and RDMA device `device` (through
/// [`backend::verbs`], first: a build without it says so before binding).
fn mixed(
    reactor: &UdpReactor,
    at: SocketAddrV4,
    netns: Option<PathBuf>,
    device: &str,
    mtu: Mtu,
    udp_requests: bool,
    job: &impl Job,
) -> ExitCode {
    let verbs = match backend::verbs() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rctb: {device:?} is not an IPv4 address, and opening it as an RDMA device needs verbs: {e}");
            return ExitCode::from(2);
        }
    };
    let udp = match bind(reactor, "udp", at, mtu, netns) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let verbs = match verbs.open(device) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rctb: {e}");
            return ExitCode::from(2);
        }
    };
    let mut u: Either<UdpTransport, Driven<backend::Device>> = Either::A(udp);
    let mut v = Either::B(Driven::new(verbs, reactor.clone()));
    let code = if udp_requests { job.run(&mut u, &mut v) } else { job.run(&mut v, &mut u) };
    if let Either::A(t) = &u {
        eprintln!("rctb: udp {at}: {:?}", t.stats());
    }
    code
}

/// `rctb udp-bench`: figures of the udp backend.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The writer: an IPv4 address (UDP endpoint) or an RDMA device (default 127.0.0.2).
    #[arg(long)]
    pub device: Option<String>,
    /// The target: an IPv4 address (UDP endpoint) or an RDMA device (default 127.0.0.1).
    #[arg(long)]
    pub peer: Option<String>,
    /// The active MTU of UDP endpoints.
    #[arg(long, default_value_t = 4096)]
    pub mtu: u32,
    /// Bytes per RDMA WRITE.
    #[arg(long, default_value_t = 1 << 20)]
    pub size: u32,
    /// WRITEs per run.
    #[arg(long, default_value_t = 256)]
    pub iters: u32,
    /// WRITEs outstanding at once.
    #[arg(long, default_value_t = 4)]
    pub depth: u32,
    /// Runs of the WRITE bandwidth test (one BENCH line each).
    #[arg(long, default_value_t = 1)]
    pub reps: u32,
    /// 64-byte SEND round trips to time (0: none).
    #[arg(long, default_value_t = 2000)]
    pub pingpong: u32,
    /// Between two UDP endpoints, also time plain UDP sockets moving the same
    /// bytes (the `udp-sockets` BENCH lines), as the baseline.
    #[arg(long)]
    pub baseline: bool,
    /// Seconds to wait idle while measuring the process's CPU time (0: none).
    #[arg(long, default_value_t = 2.0)]
    pub idle_secs: f64,
    /// Also run the WRITEs with the target, a UDP endpoint, in another rctb
    /// process (the `rctb-udp-2proc` BENCH lines): with a UDP `--device`
    /// the writer is the udp backend, with an RDMA device (`rctb0` through
    /// rctb's libibverbs.so.1, say) it is the verbs backend on it.
    #[arg(long)]
    pub two_processes: bool,
    /// With `--two-processes`: run only those WRITEs (for a profiler).
    #[arg(long, requires = "two_processes")]
    pub only_two_processes: bool,
    // The doc line is the flag's help text too: keep its brackets as written.
    #[allow(rustdoc::broken_intra_doc_links)]
    /// (internal) Be the WRITE target of `--two-processes` on ADDR[:PORT].
    #[arg(long, hide = true, value_name = "ADDR")]
    pub serve_target: Option<String>,
}

pub fn bench(args: &BenchArgs) -> ExitCode {
    let mtu = || Mtu::from_bytes(args.mtu).map_err(|e| format!("--mtu: {e}"));
    if let Some(at) = &args.serve_target {
        let r = match (Endpoint::parse(at), mtu()) {
            (Endpoint::Udp(at), Ok(mtu)) => split::serve_target(at, mtu, args.size),
            (_, Err(e)) => Err(e),
            (Endpoint::Device(_), _) => Err(format!("--serve-target {at:?}: an IPv4 address[:port]")),
        };
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rctb: udp-bench target: {e}");
                ExitCode::from(1)
            }
        };
    }
    let code = if args.only_two_processes {
        ExitCode::SUCCESS
    } else {
        with_pair(args.device.as_deref(), args.peer.as_deref(), args.mtu, &Bench { args })
    };
    if !args.two_processes || code != ExitCode::SUCCESS {
        return code;
    }
    let (a, b) = (
        Endpoint::parse(args.device.as_deref().unwrap_or("127.0.0.2")),
        Endpoint::parse(args.peer.as_deref().unwrap_or("127.0.0.1")),
    );
    let r = match (a, b, mtu()) {
        (Endpoint::Udp(a), Endpoint::Udp(b), Ok(mtu)) => split::bench_udp(args, a, b, mtu),
        (Endpoint::Device(d), Endpoint::Udp(b), Ok(mtu)) => split::bench_device(args, &d, b, mtu),
        (_, _, Err(e)) => Err(e),
        _ => Err("--two-processes needs a UDP endpoint (an IPv4 address) as --peer".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rctb: udp-bench --two-processes: {e}");
            ExitCode::from(1)
        }
    }
}

struct Bench<'a> {
    args: &'a BenchArgs,
}

impl Job for Bench<'_> {
    fn run<O: Transport>(&self, a: &mut Either<UdpTransport, O>, b: &mut Either<UdpTransport, O>) -> ExitCode {
        self.run_any(a, b)
    }

    fn baseline(&self, a: Ipv4Addr, b: Ipv4Addr, mtu: Mtu) {
        if self.args.baseline
            && let Err(e) = sockets_baseline(self.args, a, b, mtu)
        {
            eprintln!("rctb: udp-bench: socket baseline: {e}");
        }
    }
}

impl Bench<'_> {
    fn run_any<T: Transport>(&self, a: &mut T, b: &mut T) -> ExitCode {
        let mut ends = match conformance::Endpoints::new(a, b) {
            Ok(e) => e,
            Err(why) => {
                eprintln!("rctb: udp-bench: setup: {why}");
                return ExitCode::from(2);
            }
        };
        let r = bench_body(&mut ends, self.args);
        let cleanup = ends.release();
        match (r, cleanup) {
            (Ok(()), Ok(())) => ExitCode::SUCCESS,
            (Err(why), _) | (Ok(()), Err(why)) => {
                eprintln!("rctb: udp-bench: {why}");
                ExitCode::from(1)
            }
        }
    }
}

/// The same bytes as the WRITE runs, as MTU-sized datagrams from a plain
/// UDP socket on `a` to one on `b`, sent 16 at a time (well inside the
/// default socket buffer) and read back: what the kernel's loopback costs
/// without RC. A datagram that never comes counts as lost after 20 ms.
#[allow(clippy::disallowed_methods)] // a benchmark timing real sockets reads the real clock
fn sockets_baseline(args: &BenchArgs, a: Ipv4Addr, b: Ipv4Addr, mtu: Mtu) -> std::io::Result<()> {
    use std::net::UdpSocket;
    let (tx, rx) = (UdpSocket::bind((a, 0))?, UdpSocket::bind((b, 0))?);
    rx.set_read_timeout(Some(std::time::Duration::from_millis(20)))?;
    let to = rx.local_addr()?;
    let dgram = vec![0x5au8; mtu.bytes() as usize + 32];
    let mut buf = vec![0u8; 65536];
    let total = args.size as u64 * args.iters as u64;
    for _ in 0..args.reps {
        let t0 = std::time::Instant::now();
        let (mut got, mut lost) = (0u64, 0u64);
        while got + lost < total {
            let mut sent = 0;
            while sent < 16 && got + lost + (sent as u64 * mtu.bytes() as u64) < total {
                tx.send_to(&dgram, to)?;
                sent += 1;
            }
            for _ in 0..sent {
                match rx.recv_from(&mut buf) {
                    Ok(_) => got += mtu.bytes() as u64,
                    Err(_) => lost += mtu.bytes() as u64,
                }
            }
        }
        let mb = got as f64 / 1_048_576.0;
        println!("BENCH write_bw-{} udp-sockets {:.1} MB/s", label(args.size), mb / t0.elapsed().as_secs_f64());
    }
    Ok(())
}

fn label(size: u32) -> String {
    if size == 1 << 20 { "1MiB".to_string() } else { format!("{size}B") }
}

/// Waits for completions on `cq` of `t` and returns them (at least one, or
/// an error after 10 s); every one must be a success.
fn next_completions<T: Transport>(t: &mut T, cq: CqId, out: &mut Vec<Completion>) -> Result<(), String> {
    let deadline = t.now() + Duration::from_secs(10);
    out.clear();
    loop {
        t.poll_cq(cq, 64, out).map_err(|e| format!("poll_cq: {e}"))?;
        if let Some(bad) = out.iter().find(|c| c.status != WcStatus::Success) {
            return Err(format!("completion wr {} {} status {}", bad.wr_id, bad.opcode.name(), bad.status));
        }
        if !out.is_empty() {
            return Ok(());
        }
        if t.wait(&[cq], deadline).map_err(|e| format!("wait: {e}"))? == Readiness::TimedOut && t.now() >= deadline {
            return Err("no completion within 10 s".into());
        }
    }
}

fn bench_body<T: Transport>(x: &mut conformance::Endpoints<'_, T>, args: &BenchArgs) -> Result<(), String> {
    let size = args.size;
    let src = x.mr(true, size as u64, Access::LOCAL_WRITE)?;
    let dst = x.mr(false, size as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
    let ping = x.mr(true, 64, Access::LOCAL_WRITE)?;
    let pong = x.mr(false, 64, Access::LOCAL_WRITE)?;
    let pair = x.connect(conformance::Link::default())?;
    let (cq_a, cq_b) = (x.sa.cq, x.sb.cq);
    let label = label(size);
    let mut wcs = Vec::new();
    // RDMA WRITE bandwidth, `depth` outstanding.
    let sge = [Sge::new(src.id, 0, size)];
    for _ in 0..args.reps {
        let t0 = x.a.now();
        let (mut posted, mut done) = (0u32, 0u32);
        while done < args.iters {
            while posted < args.iters && posted - done < args.depth.max(1) {
                let wr = SendWr::new(posted as u64, SendOp::Write { remote: dst.remote(0) }, &sge);
                x.a.post_send(pair.a.id, &wr).map_err(|e| format!("post_send: {e}"))?;
                posted += 1;
            }
            next_completions(x.a, cq_a, &mut wcs)?;
            done += wcs.len() as u32;
        }
        let secs = (x.a.now() - t0).as_secs_f64();
        let mb = size as f64 * args.iters as f64 / 1_048_576.0;
        println!("BENCH write_bw-{label} rctb-udp {:.1} MB/s", mb / secs);
    }
    // 64-byte SEND round trips: a sends, b answers.
    if args.pingpong > 0 {
        let (sa, sb) = ([Sge::new(ping.id, 0, 64)], [Sge::new(pong.id, 0, 64)]);
        x.a.post_recv(pair.a.id, &RecvWr::new(1, &sa)).map_err(|e| format!("post_recv a: {e}"))?;
        x.b.post_recv(pair.b.id, &RecvWr::new(1, &sb)).map_err(|e| format!("post_recv b: {e}"))?;
        let mut rtts = Vec::with_capacity(args.pingpong as usize);
        for i in 0..args.pingpong {
            let t0 = x.a.now();
            x.a.post_send(pair.a.id, &SendWr::new(i as u64, SendOp::Send, &sa)).map_err(|e| format!("send a: {e}"))?;
            // b: the request arrives; re-post, answer.
            loop {
                next_completions(x.b, cq_b, &mut wcs)?;
                if wcs.iter().any(|c| c.opcode == WcOpcode::Recv) {
                    break;
                }
            }
            x.b.post_recv(pair.b.id, &RecvWr::new(1, &sb)).map_err(|e| format!("post_recv b: {e}"))?;
            x.b.post_send(pair.b.id, &SendWr::new(i as u64, SendOp::Send, &sb)).map_err(|e| format!("send b: {e}"))?;
            loop {
                next_completions(x.a, cq_a, &mut wcs)?;
                if wcs.iter().any(|c| c.opcode == WcOpcode::Recv) {
                    break;
                }
            }
            rtts.push((x.a.now() - t0).as_nanos() as u64);
            x.a.post_recv(pair.a.id, &RecvWr::new(1, &sa)).map_err(|e| format!("post_recv a: {e}"))?;
        }
        rtts.sort_unstable();
        let at = |q: f64| rtts[((rtts.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
        println!(
            "LATENCY send-64B round trip over {} iterations: min {:.1} us, median {:.1} us, p99 {:.1} us",
            rtts.len(),
            at(0.0),
            at(0.5),
            at(0.99)
        );
    }
    // Idle: nothing outstanding, a wait with a deadline; the process's CPU time.
    if args.idle_secs > 0.0 {
        let cpu = || {
            nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).map(|u| {
                let us = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
                us(u.user_time()) + us(u.system_time())
            })
        };
        let before = cpu().map_err(|e| format!("getrusage: {e}"))?;
        let t0 = x.a.now();
        let until = t0 + Duration::from_secs_f64(args.idle_secs);
        while x.a.now() < until {
            x.a.wait(&[cq_a], until).map_err(|e| format!("wait: {e}"))?;
            x.a.poll_cq(cq_a, 64, &mut wcs).map_err(|e| format!("poll_cq: {e}"))?;
        }
        let wall = (x.a.now() - t0).as_secs_f64();
        let used = (cpu().map_err(|e| format!("getrusage: {e}"))? - before) / 1e6;
        println!("IDLE cpu {:.3} ms in {:.2} s waiting ({:.3}% of one core)", used * 1e3, wall, 100.0 * used / wall);
    }
    Ok(())
}

/// `rctb udp-bench --two-processes`: the WRITE target is another rctb
/// process (`udp-bench --serve-target ADDR`, spawned here), each with its
/// own endpoint and reactor, the QPs connected through the child's stdin
/// and stdout (QPN, PSN, the region's address and rkey).
mod split {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{Ipv4Addr, SocketAddrV4};
    use std::process::{Command, Stdio};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use rctb_core::Transport;
    use rctb_core::time::Duration;
    use rctb_core::transport::{
        Access, AddressVector, CqId, Gid, GidType, InitAttr, MrInfo, Mtu, Psn, QpCaps, QpInfo, QpInit, QpTransition,
        RemoteAddr, RnrTimer, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    };
    use rctb_udp::UdpTransport;

    use crate::cli::backend;

    use super::{BenchArgs, label, next_completions};

    /// One process's end: its endpoint, CQ, QP and region, and the index
    /// of the GID its address vectors name.
    struct End<T> {
        t: T,
        cq: CqId,
        qp: QpInfo,
        mr: MrInfo,
        gid_index: u32,
    }

    fn udp_end(at: SocketAddrV4, mtu: Mtu, len: u64, access: Access) -> Result<End<UdpTransport>, String> {
        let cfg = backend::udp_config("bench", at, mtu);
        let t = UdpTransport::bind(cfg).map_err(|e| e.to_string())?;
        end(t, len, access)
    }

    /// The port's IPv4-mapped RoCE v2 GID: its index and its address.
    fn roce_v2_ipv4<T: Transport>(t: &mut T) -> Result<(u32, Ipv4Addr), String> {
        let port = t.port(1).map_err(|e| format!("port 1: {e}"))?;
        port.gids
            .iter()
            .find_map(|g| Some((g.index, g.gid.to_ipv4()?)).filter(|_| g.gid_type == GidType::RoceV2))
            .ok_or_else(|| format!("port 1 has no IPv4-mapped RoCE v2 GID (table: {:?})", port.gids))
    }

    fn end<T: Transport>(mut t: T, len: u64, access: Access) -> Result<End<T>, String> {
        let (gid_index, _) = roce_v2_ipv4(&mut t)?;
        let v = |what: &'static str| move |e: rctb_core::transport::TransportError| format!("{what}: {e}");
        let pd = t.alloc_pd().map_err(v("alloc_pd"))?;
        let cq = t.create_cq(256).map_err(v("create_cq"))?;
        let mr = t.reg_mr(pd, len, access).map_err(v("reg_mr"))?;
        let caps = QpCaps { max_send_wr: 64, max_recv_wr: 64, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
        let qp = t
            .create_qp(&QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: false, srq: None })
            .map_err(v("create_qp"))?;
        Ok(End { t, cq, qp, mr, gid_index })
    }

    /// RESET -> INIT -> RTR -> RTS toward `peer`'s QP `dest`.
    fn connect<T: Transport>(
        e: &mut End<T>,
        mtu: Mtu,
        peer: Ipv4Addr,
        dest: u32,
        rq_psn: u32,
        sq_psn: u32,
    ) -> Result<(), String> {
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let steps = [
            QpTransition::Init(InitAttr { pkey_index: 0, port: 1, access }),
            QpTransition::Rtr(RtrAttr {
                path_mtu: mtu,
                dest_qpn: dest & rctb_core::transport::MAX_24BIT,
                rq_psn: Psn::wrapping(rq_psn),
                max_dest_rd_atomic: 16,
                min_rnr_timer: RnrTimer::default(),
                av: AddressVector::new(Gid::from_ipv4(peer), e.gid_index),
            }),
            QpTransition::Rts(RtsAttr {
                sq_psn: Psn::wrapping(sq_psn),
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 16,
            }),
        ];
        for s in &steps {
            e.t.modify_qp(e.qp.id, s).map_err(|x| format!("modify_qp: {x}"))?;
        }
        Ok(())
    }

    /// `key=value` fields of a hand-off line, as numbers.
    fn field(line: &str, key: &str) -> Result<u64, String> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
            .and_then(|v| v.strip_prefix("0x").map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok()))
            .ok_or_else(|| format!("hand-off line {line:?}: no number {key}="))
    }

    const TARGET_PSN: u32 = 0x12_3456;
    const WRITER_PSN: u32 = 0xFF_FF00;

    /// The target process: a region others write into; answers until its
    /// stdin closes.
    pub fn serve_target(at: SocketAddrV4, mtu: Mtu, size: u32) -> Result<(), String> {
        let mut e = udp_end(at, mtu, size as u64, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
        let mut out = std::io::stdout().lock();
        let r = e.mr.remote(0);
        writeln!(out, "target qpn={} addr={:#x} rkey={:#x}", e.qp.qpn, r.addr, r.rkey).map_err(|x| x.to_string())?;
        out.flush().map_err(|x| x.to_string())?;
        let mut stdin = BufReader::new(std::io::stdin());
        let mut line = String::new();
        stdin.read_line(&mut line).map_err(|x| x.to_string())?;
        let peer = line.split_whitespace().find_map(|w| w.strip_prefix("ip=")).unwrap_or_default();
        let peer: Ipv4Addr = peer.parse().map_err(|_| format!("hand-off line {line:?}: no ip="))?;
        connect(&mut e, mtu, peer, field(&line, "qpn")? as u32, WRITER_PSN, TARGET_PSN)?;
        writeln!(out, "ready").and_then(|()| out.flush()).map_err(|x| x.to_string())?;
        // Answer (ACK every WRITE) until the writer closes our stdin.
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        std::thread::spawn(move || {
            let mut rest = String::new();
            while stdin.read_line(&mut rest).is_ok_and(|n| n > 0) {}
            flag.store(true, Ordering::Relaxed);
        });
        let mut wcs = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let until = e.t.now() + Duration::from_millis(20);
            e.t.wait(&[e.cq], until).map_err(|x| format!("wait: {x}"))?;
            e.t.poll_cq(e.cq, 64, &mut wcs).map_err(|x| format!("poll_cq: {x}"))?;
            wcs.clear();
        }
        Ok(())
    }

    /// The writer, a UDP endpoint at `a`: see [`bench`].
    pub fn bench_udp(args: &BenchArgs, a: SocketAddrV4, b: SocketAddrV4, mtu: Mtu) -> Result<(), String> {
        bench(args, || udp_end(a, mtu, args.size as u64, Access::LOCAL_WRITE), b, mtu)
    }

    /// The writer, RDMA device `device` through the verbs backend: see [`bench`].
    pub fn bench_device(args: &BenchArgs, device: &str, b: SocketAddrV4, mtu: Mtu) -> Result<(), String> {
        let verbs = backend::verbs().map_err(|e| format!("{device:?} is an RDMA device, which needs verbs: {e}"))?;
        let t = verbs.open(device).map_err(|e| e.to_string())?;
        bench(args, || end(t, args.size as u64, Access::LOCAL_WRITE), b, mtu)
    }

    /// The writer: spawns the target (a UDP endpoint at `b` in another
    /// process), makes its own end, then `reps` runs of `iters` WRITEs.
    fn bench<T: Transport>(
        args: &BenchArgs,
        writer: impl FnOnce() -> Result<End<T>, String>,
        b: SocketAddrV4,
        mtu: Mtu,
    ) -> Result<(), String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .args(["udp-bench", "--serve-target", &b.to_string(), "--mtu", &mtu.bytes().to_string()])
            .args(["--size", &args.size.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning the target process: {e}"))?;
        let r = (|| {
            let mut from = BufReader::new(child.stdout.take().ok_or("no child stdout")?);
            let mut line = String::new();
            from.read_line(&mut line).map_err(|e| e.to_string())?;
            let remote = RemoteAddr { addr: field(&line, "addr")?, rkey: field(&line, "rkey")? as u32 };
            let mut e = writer()?;
            let (_, ip) = roce_v2_ipv4(&mut e.t)?;
            connect(&mut e, mtu, *b.ip(), field(&line, "qpn")? as u32, TARGET_PSN, WRITER_PSN)?;
            let mut to = child.stdin.take().ok_or("no child stdin")?;
            writeln!(to, "writer qpn={} ip={ip}", e.qp.qpn).map_err(|x| x.to_string())?;
            to.flush().map_err(|x| x.to_string())?;
            line.clear();
            from.read_line(&mut line).map_err(|x| x.to_string())?;
            if line.trim() != "ready" {
                return Err(format!("the target said {line:?}, not ready"));
            }
            let sge = [Sge::new(e.mr.id, 0, args.size)];
            let mut wcs = Vec::new();
            for _ in 0..args.reps {
                let t0 = e.t.now();
                let (mut posted, mut done) = (0u32, 0u32);
                while done < args.iters {
                    while posted < args.iters && posted - done < args.depth.max(1) {
                        let wr = SendWr::new(posted as u64, SendOp::Write { remote }, &sge);
                        e.t.post_send(e.qp.id, &wr).map_err(|x| format!("post_send: {x}"))?;
                        posted += 1;
                    }
                    next_completions(&mut e.t, e.cq, &mut wcs)?;
                    done += wcs.len() as u32;
                }
                let secs = (e.t.now() - t0).as_secs_f64();
                let mb = args.size as f64 * args.iters as f64 / 1_048_576.0;
                println!("BENCH write_bw-{} rctb-udp-2proc {:.1} MB/s", label(args.size), mb / secs);
            }
            drop(to);
            Ok(())
        })();
        let status = child.wait().map_err(|e| e.to_string())?;
        r?;
        if !status.success() {
            return Err(format!("the target process exited with {status}"));
        }
        Ok(())
    }
}

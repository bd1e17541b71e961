//! The devices (one per address of `RCTB_IBV_ADDR`, for the life of the
//! process) and the engine of an opened device: one RC engine on one UDP
//! socket, driven by a progress thread, shared by every context opened on
//! the device (as one NIC serves every context of every process).

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::net::Ipv4Addr;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rctb_core::transport::{AsyncEvent, Completion, CqId, MrId, Mtu, QpId, SrqId};
use rctb_udp::progress::{self, Progress};
use rctb_udp::{Driver, RawRx, UdpConfig};

use crate::config::{self, StatsSink};
use crate::objects::Channel;
use crate::sys;

/// One device: the C struct programs see, and what the library knows of it.
#[repr(C)]
pub(crate) struct Device {
    pub dev: sys::ibv_device,
    /// What a provider library (Debian's libmlx5, which perftest links)
    /// reads just past an `ibv_device` to ask whether it is one of its
    /// own (`verbs_device.ops`): NULL, so it never takes ours for one.
    provider_ops: *const c_void,
    pub index: usize,
    pub ip: Ipv4Addr,
    pub mtu: Mtu,
    /// The port's MAC, from the address (02:00:a:b:c:d).
    pub mac: [u8; 6],
    runtime: Mutex<Weak<Runtime>>,
}

// SAFETY: the only raw pointer is `provider_ops`, always NULL; the C
// struct holds only names and numbers, written once before the device is
// shared and never again.
unsafe impl Sync for Device {}
// SAFETY: as for Sync.
unsafe impl Send for Device {}

impl Device {
    /// The node GUID, EUI-64 of the MAC, in network order as the C struct wants.
    pub fn guid_be(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]).to_be()
    }

    pub fn name(&self) -> String {
        format!("rctb{}", self.index)
    }

    /// The opened device's engine, started on the first open.
    pub fn open(&'static self) -> Result<Arc<Runtime>, String> {
        let mut slot = self.runtime.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(rt) = slot.upgrade() {
            return Ok(rt);
        }
        let rt = Arc::new(Runtime::start(self)?);
        *slot = Arc::downgrade(&rt);
        Ok(rt)
    }
}

fn copy_name(dst: &mut [std::ffi::c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as std::ffi::c_char;
    }
}

/// The devices of this process (empty when the configuration is bad).
pub(crate) fn devices() -> &'static [&'static Device] {
    static DEVICES: OnceLock<Vec<&'static Device>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let Ok(cfg) = config::get() else { return Vec::new() };
        cfg.addrs
            .iter()
            .enumerate()
            .map(|(index, &ip)| {
                let o = ip.octets();
                let mut dev = sys::ibv_device {
                    node_type: sys::IBV_NODE_CA,
                    transport_type: sys::IBV_TRANSPORT_IB,
                    ..Default::default()
                };
                copy_name(&mut dev.name, &format!("rctb{index}"));
                copy_name(&mut dev.dev_name, &format!("uverbs-rctb{index}"));
                copy_name(&mut dev.dev_path, &format!("/sys/class/infiniband_verbs/uverbs-rctb{index}"));
                copy_name(&mut dev.ibdev_path, &format!("/sys/class/infiniband/rctb{index}"));
                let d = Device {
                    dev,
                    provider_ops: std::ptr::null(),
                    index,
                    ip,
                    mtu: port_mtu(ip),
                    mac: [0x02, 0x00, o[0], o[1], o[2], o[3]],
                    runtime: Mutex::new(Weak::new()),
                };
                &*Box::leak(Box::new(d))
            })
            .collect()
    })
}

/// The device of a program's `ibv_device` pointer (NULL if it is not one of ours).
pub(crate) fn find(dev: *const sys::ibv_device) -> Option<&'static Device> {
    devices().iter().copied().find(|d| std::ptr::eq(&d.dev, dev))
}

/// The largest IB MTU whose RoCEv2 frames fit the MTU of the interface
/// that owns `ip` (as rxe: 1500 gives 1024; loopback and jumbo frames 4096).
fn port_mtu(ip: Ipv4Addr) -> Mtu {
    let link = interface_mtu(ip).unwrap_or(65536);
    // IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4, and room to spare.
    let fits = |m: Mtu| m.bytes() as usize + 80 <= link;
    Mtu::ALL.iter().rev().copied().find(|&m| fits(m)).unwrap_or(Mtu::Mtu256)
}

fn interface_mtu(ip: Ipv4Addr) -> Option<usize> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list it allocates; it is read
    // below while alive and freed once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut name = None;
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: `cur` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        // SAFETY: a non-NULL ifa_addr of family AF_INET is a sockaddr_in.
        if !ifa.ifa_addr.is_null() && unsafe { (*ifa.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: as above.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            if Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)) == ip {
                // SAFETY: ifa_name is a NUL-terminated string of the list.
                name = Some(unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned());
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    std::fs::read_to_string(format!("/sys/class/net/{}/mtu", name?)).ok()?.trim().parse().ok()
}

/// An opened device: its engine and sockets, the progress thread, and what
/// the library keeps beside the engine under the same lock.
pub(crate) struct Runtime {
    pub device: &'static Device,
    pub progress: Progress<Owner>,
}

/// Where a CQ's notifications and asynchronous events go.
pub(crate) struct CqLink {
    pub cq: usize,
    pub channel: Option<Arc<Channel>>,
    pub async_sink: Arc<OwnedFd>,
}

/// A registered region, by its lkey (SGEs name regions by lkey and address).
#[derive(Clone, Copy)]
pub(crate) struct MrLink {
    pub id: MrId,
    pub iova: u64,
    /// Registered with IBV_ACCESS_LOCAL_WRITE: the device may write it
    /// (a receive, a READ response, an atomic's original value).
    pub local_write: bool,
}

/// What the library keeps beside the engine, under the engine's lock.
#[derive(Default)]
pub(crate) struct Owner {
    pub cqs: BTreeMap<CqId, CqLink>,
    pub mrs: BTreeMap<u32, MrLink>,
    /// QP handle -> (QP number, the `ibv_qp` pointer, its context's async sink).
    pub qps: BTreeMap<QpId, (u32, usize, Arc<OwnedFd>)>,
    pub srqs: BTreeMap<SrqId, (usize, Arc<OwnedFd>)>,
    /// Completions moved out of the engine before they become `ibv_wc`s.
    pub scratch: Vec<Completion>,
    /// Where CM events go (librdmacm's sink), and its cookies.
    pub cm: crate::cm::CmLinks,
}

/// One asynchronous event as the async descriptor carries it: the object
/// (a pointer, or the port number) and the event type.
pub(crate) const ASYNC_RECORD: usize = 16;

fn post_async(sink: &OwnedFd, element: usize, event: u32) {
    let mut rec = [0u8; ASYNC_RECORD];
    rec[..8].copy_from_slice(&(element as u64).to_ne_bytes());
    rec[8..12].copy_from_slice(&event.to_ne_bytes());
    // A full pipe (64 KiB of unread events) drops the newest: the program
    // stopped reading them.
    let _ = rustix::io::write(sink, &rec);
}

impl progress::Owner for Owner {
    fn after_turn(&mut self, driver: &mut Driver) {
        // What the turn left: no verb, so no new clock reading (on a guest
        // whose clock traps, one per poll was most of a poll's cost).
        let (engine, _) = driver.engine_mut_at_last(0);
        while let Some(cq) = engine.poll_cq_notification() {
            if let Some(CqLink { cq, channel: Some(ch), .. }) = self.cqs.get(&cq) {
                ch.push(*cq);
            }
        }
        while let Some(ev) = engine.poll_async_event() {
            match ev {
                AsyncEvent::CqErr { cq } => {
                    if let Some(l) = self.cqs.get(&cq) {
                        post_async(&l.async_sink, l.cq, sys::IBV_EVENT_CQ_ERR);
                    }
                }
                AsyncEvent::QpFatal { qp } | AsyncEvent::QpLastWqeReached { qp } => {
                    let kind = match ev {
                        AsyncEvent::QpFatal { .. } => sys::IBV_EVENT_QP_FATAL,
                        _ => sys::IBV_EVENT_QP_LAST_WQE_REACHED,
                    };
                    if let Some((_, ptr, sink)) = self.qps.get(&qp) {
                        post_async(sink, *ptr, kind);
                    }
                }
                AsyncEvent::SrqLimitReached { srq } => {
                    if let Some((ptr, sink)) = self.srqs.get(&srq) {
                        post_async(sink, *ptr, sys::IBV_EVENT_SRQ_LIMIT_REACHED);
                    }
                }
                #[allow(unreachable_patterns)]
                _ => {}
            }
        }
        while let Some(ev) = engine.poll_cm_event() {
            self.cm.deliver(ev);
        }
    }
}

impl Runtime {
    fn start(device: &'static Device) -> Result<Runtime, String> {
        let cfg = config::get().map_err(|e| e.to_string())?;
        let seed = cfg.faults.map_or_else(|| u64::from(std::process::id()), |f| f.seed);
        let mut driver = Driver::new(seed ^ device.index as u64);
        let mut ucfg = UdpConfig::new(device.name(), device.ip);
        ucfg.mtu = device.mtu;
        // The raw socket (CAP_NET_RAW) sees a kernel rxe peer's real IPv4
        // header; without it, frames from other rctb processes still check.
        ucfg.raw_rx = RawRx::Auto;
        if let Some(spec) = cfg.faults {
            ucfg.hook = Some(rctb_udp::faults::PacketFaults::new(spec).into_hook());
        }
        driver.add(ucfg).map_err(|e| {
            let taken = matches!(&e, rctb_udp::UdpError::Bind { source, .. }
                if source.kind() == std::io::ErrorKind::AddrInUse);
            let hint = if taken {
                " (another process has this address: give each process its own with RCTB_IBV_ADDR=127.0.0.N)"
            } else {
                ""
            };
            format!("rctb libibverbs: {}: {e}{hint}", device.name())
        })?;
        if let Some(path) = &cfg.pcap {
            let path = if cfg.addrs.len() > 1 { with_device(path, device.index) } else { path.clone() };
            driver
                .enable_pcap_file(&path)
                .map_err(|e| format!("rctb libibverbs: RCTB_IBV_PCAP={}: {e}", path.display()))?;
        }
        let progress = Progress::start(driver, Owner::default(), &format!("rctb{}-progress", device.index))
            .map_err(|e| format!("rctb libibverbs: {}: progress thread: {e}", device.name()))?;
        register_exit_report();
        Ok(Runtime { device, progress })
    }

    /// The device's counts, as one line for people or one JSON object.
    pub fn report(&self, json: bool) -> String {
        let t = self.progress.thread_counts();
        let st = self.progress.lock();
        let d = &st.driver;
        let (udp, eng, ep) = (d.stats(0), d.engine_stats(), d.engine(0).counters());
        if json {
            serde_json::json!({
                "thread": {
                    "turns": t.turns, "watches": t.watches, "watch_ends_still": t.watch_ends_still,
                    "watch_ends_bell": t.watch_ends_bell, "frames_left_to_poller": t.frames_left_to_poller,
                    "polls_lock_taken": t.polls_lock_taken,
                },
                "device": self.device.name(), "addr": self.device.ip.to_string(),
                "frames_sent": udp.tx_frames, "frames_received": udp.rx_frames,
                "retransmitted": eng.retransmitted, "timeouts": eng.timeouts,
                "dropped": udp.tx_dropped + udp.rx_dropped, "duplicated": udp.tx_duplicated + udp.rx_duplicated,
                "delayed": udp.tx_delayed + udp.rx_delayed, "rnr_naks_sent": eng.rnr_naks,
                "rnr_naks_received": udp.rx_naks_rnr, "seq_naks_sent": eng.seq_naks,
                "seq_naks_received": udp.rx_naks_seq, "bad_icrc": udp.rx_bad_icrc,
                "send_errors": udp.tx_errors, "cm_retransmitted": ep.cm_retransmitted,
                "clock_reads": eng.clock_reads,
            })
            .to_string()
        } else {
            format!(
                "rctb libibverbs: {} {}: sent {} frames, received {}; retransmitted {}, timeouts {}; \
                 fault hook: dropped {}, duplicated {}, delayed {}; RNR NAKs sent {}, received {}; \
                 sequence NAKs sent {}, received {}; bad ICRC {}; send errors {}",
                self.device.name(),
                self.device.ip,
                udp.tx_frames,
                udp.rx_frames,
                eng.retransmitted,
                eng.timeouts,
                udp.tx_dropped + udp.rx_dropped,
                udp.tx_duplicated + udp.rx_duplicated,
                udp.tx_delayed + udp.rx_delayed,
                eng.rnr_naks,
                udp.rx_naks_rnr,
                eng.seq_naks,
                udp.rx_naks_seq,
                udp.rx_bad_icrc,
                udp.tx_errors,
            )
        }
    }

    /// Prints or appends the report where `RCTB_IBV_STATS` says, and
    /// writes out the capture.
    pub fn finish(&self) {
        {
            let mut st = self.progress.lock();
            // ACKs a last poll left for the program's next call, which
            // will not come.
            let _ = st.turn();
            st.driver.flush_pcap();
        }
        let Ok(cfg) = config::get() else { return };
        match &cfg.stats {
            None => {}
            Some(StatsSink::Stderr) => eprintln!("{}", self.report(false)),
            Some(StatsSink::File(path)) => {
                use std::io::Write;
                // One write of the whole line: processes that share the file
                // append whole lines (O_APPEND), never halves.
                let line = self.report(true) + "\n";
                let f = std::fs::OpenOptions::new().create(true).append(true).open(path);
                match f {
                    Ok(mut f) => {
                        let _ = f.write_all(line.as_bytes());
                    }
                    Err(e) => eprintln!("rctb libibverbs: RCTB_IBV_STATS={}: {e}", path.display()),
                }
            }
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.finish();
    }
}

fn with_device(path: &std::path::Path, index: usize) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".rctb{index}"));
    s.into()
}

/// At exit, the devices still open report and write out their captures
/// (a program need not close its device; the threads end with the process).
fn register_exit_report() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        extern "C" fn at_exit() {
            for d in devices() {
                let rt = d.runtime.lock().ok().and_then(|w| w.upgrade());
                if let Some(rt) = rt {
                    rt.finish();
                }
            }
        }
        // SAFETY: registers a function with C linkage that takes nothing;
        // it runs once at exit and catches nothing it could unwind.
        unsafe { libc::atexit(at_exit) };
    });
}

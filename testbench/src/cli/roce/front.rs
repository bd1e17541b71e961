//! `rctb roce-rx` and `rctb fpga-emu` on a real transport: each side on its
//! own device or UDP endpoint (and process), connected through the hand-off.
//! Generic over [`Transport`]: `super::verbs` opens an RDMA device,
//! `super::udp` a UDP endpoint (rctb-udp), and both run this code.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;

use rctb_core::Transport;
use rctb_core::roce::{GidIndex, RoceServer};
use rctb_core::time::{Duration, Instant};
use rctb_core::transport::{Idle, Mtu, Poller};
use rctb_models::fpga::{FpgaEngine, setup_connection, teardown_connection};

use super::args::*;
use rctb_scenario::roce::check::FrameCheck;
use rctb_scenario::roce::handoff::{Channel, DoneMsg, FpgaMsg, HandoffError, HandoffIn, HandoffOut, HostMsg, Message};

/// Human output: stdout, unless the hand-off uses it.
struct Console {
    stderr: bool,
}

impl Console {
    fn line(&self, s: &str) {
        if self.stderr {
            eprintln!("{s}");
        } else {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{s}");
            let _ = o.flush();
        }
    }
}

/// Unpredictable 32-bit draws (PSNs, engine keys): a real host must not
/// reuse a previous session's PSNs.
pub(super) fn random() -> impl FnMut() -> u32 {
    let state = RandomState::new();
    let mut n = 0u64;
    move || {
        n += 1;
        let mut h = state.build_hasher();
        h.write_u64(n);
        h.finish() as u32
    }
}

fn ms(d: Duration) -> Duration {
    d.max(Duration::from_millis(1))
}

/// `rctb roce-rx` on `t` (named `device`), from host GID index `gid`, for
/// the FPGA at `fpga_ip`.
pub fn roce_rx<T: Transport>(
    t: T,
    device: &str,
    gid: GidIndex,
    fpga_ip: std::net::Ipv4Addr,
    a: &RoceRxArgs,
) -> Result<bool, CliError> {
    let cfg = rx_server(a, fpga_ip, device, gid)?;
    let tc = rx_transport(a)?;
    let (mode, repost_batch) = rx_knobs(a)?;
    let console = Console { stderr: a.host_params == "-" };
    let mut outputs = Outputs::new(a.output_dir.as_deref())?;
    let mut to_fpga = HandoffOut::open(&Channel::parse(&a.host_params))?;
    let mut from_fpga = HandoffIn::open(&Channel::parse(&a.fpga_params));
    let mut server = RoceServer::create(t, cfg, &mut random())?;
    server.set_repost_batch(repost_batch)?;
    to_fpga.send(&Message::Host(HostMsg {
        params: server.host_params(),
        gid: server.status().host_gid,
        pmtu: server.path_mtu(&tc),
        max_payload: server.config().max_payload(),
    }))?;
    let Message::Fpga(fpga) = from_fpga.expect("fpga", a.handoff_timeout)? else {
        unreachable!("expect checks the kind")
    };
    server.complete_connection(fpga.qpn, &tc, fpga.lkey)?;
    for l in server.status().to_string().lines() {
        console.line(&format!("roce-rx: {l}"));
    }
    to_fpga.send(&Message::Ready)?;

    let mut check = FrameCheck::new(!a.no_verify);
    let cq = server.cq().ok_or(rctb_core::roce::RoceError::Stopped)?;
    let mut poller = Poller::new(mode);
    let mut frames = Vec::with_capacity(a.depth as usize);
    let mut done: Option<DoneMsg> = None;
    let mut started: Option<Instant> = None;
    let mut last_frame = server.transport().now();
    let (mut last_print, mut printed) = (last_frame, (0u64, 0u64));
    let tick = Duration::from_millis(50);
    let mut spins = 0u32;
    // Why the loop stops, given the FPGA's done message (once read) and the
    // frames taken: tested every turn and again once a done message arrives.
    let stop_test = |done: Option<DoneMsg>, frames: u64| {
        if a.frames.is_some_and(|n| frames >= n) {
            Some("frame count reached")
        } else if done.is_some_and(|d| frames >= d.frames) {
            Some("the FPGA is done")
        } else {
            None
        }
    };
    // Frames taken since the clock was last read.
    let mut unclocked = false;
    let stop_reason = loop {
        // An empty poll also re-posts the slots a batch holds back.
        let n = server.poll(&mut frames)?;
        let mut slept = false;
        if n > 0 {
            poller.progress();
        } else {
            slept = matches!(poller.idle(server.transport_mut(), &[cq], |t| t.now() + tick)?, Idle::Slept(_));
        }
        for f in frames.drain(..) {
            let (ch, ring) = (f.channel(), f.ring_position());
            server.with_frame_data(&f, &mut |b: &[u8]| {
                check.frame(ch, ring, b);
                outputs.write(ch, b);
            })?;
            server.release(f)?;
        }
        unclocked |= n > 0;
        let mut stop = stop_test(done, check.frames);
        // The clock (a system call and an emulated device read on some VMs,
        // as much as a frame costs) is read at the first frame, at the stop,
        // after a sleep and every 4096 turns, not per frame: the
        // first-to-last frame time is exact, the idle timeout and progress
        // lines coarser. The FPGA's hand-off is looked at then too (a file
        // is a read() each look).
        spins = spins.wrapping_add(1);
        let first = n > 0 && started.is_none();
        if !first && !slept && stop.is_none() && !spins.is_multiple_of(4096) {
            continue;
        }
        if done.is_none()
            && let Some(Message::Done(d)) = from_fpga.poll("done")?
        {
            done = Some(d);
            stop = stop_test(done, check.frames);
        }
        let now = server.transport().now();
        if unclocked {
            started.get_or_insert(now);
            last_frame = now;
            unclocked = false;
        }
        if let Some(reason) = stop {
            break reason;
        }
        if now - last_frame > a.idle_timeout {
            break "idle timeout";
        }
        if !a.interval.is_zero() && now - last_print >= a.interval {
            let dt = now - last_print;
            console.line(&format!(
                "roce-rx: {} frames, {} bytes; last {:.1} s: {}",
                check.frames,
                check.bytes,
                dt.as_secs_f64(),
                rates(check.frames - printed.0, check.bytes - printed.1, dt)
            ));
            (last_print, printed) = (now, (check.frames, check.bytes));
        }
    };
    if a.wait_done && done.is_none() {
        match from_fpga.expect("done", a.handoff_timeout) {
            Ok(Message::Done(d)) => done = Some(d),
            Ok(_) => unreachable!("expect checks the kind"),
            Err(e) => console.line(&format!("roce-rx: no done message from the FPGA: {e}")),
        }
    }
    let elapsed = started.map_or(Duration::ZERO, |s| last_frame - s);
    outputs.finish()?;
    let counters = server.counters();
    server.stop()?;
    console.line(&format!("roce-rx: stopped: {stop_reason}"));
    let (lines, mut ok) = rx_verdict(&check, &counters, a.frames, done, ms(elapsed));
    ok &= done.is_some() || !a.wait_done;
    for l in lines {
        console.line(&l);
    }
    Ok(ok)
}

/// `rctb fpga-emu` on `t` (named `device`), from GID index `sgid`, to the
/// host at `host_ip`.
pub fn fpga_emu<T: Transport>(
    t: T,
    device: &str,
    sgid: u32,
    host_ip: std::net::Ipv4Addr,
    a: &FpgaEmuArgs,
) -> Result<bool, CliError> {
    let port = t.port(1)?;
    let gid = port.gids.iter().find(|g| g.index == sgid).map(|g| g.gid).unwrap_or_default();
    if gid.is_zero() {
        return Err(CliError::Gid(format!("GID index {sgid} of {device} port 1 is unused")));
    }
    let mut tc = emu_transport(a)?;
    let console = Console { stderr: a.fpga_params == "-" };
    let mut from_host = HandoffIn::open(&Channel::parse(&a.host_params));
    let mut to_host = HandoffOut::open(&Channel::parse(&a.fpga_params))?;
    let Message::Host(host) = from_host.expect("host", a.handoff_timeout)? else {
        unreachable!("expect checks the kind")
    };
    let stream = emu_stream(a, host.max_payload)?;
    let pmtu: Mtu = tc.pmtu().min(host.pmtu).min(port.active_mtu);
    tc = rctb_core::roce::TransportConfig::new(pmtu, tc.min_rnr_timer(), tc.rnr_retry(), tc.retry_count())?;
    let max = *stream.sizes.iter().max().expect("validated non-empty") as u64;
    let staging = u32::try_from(max * stream.window as u64)
        .map_err(|_| rctb_core::transport::InvalidValue::new("size", max, "window x largest size must be < 4 GiB"))?;
    let (mode, signal_every) = emu_knobs(a)?;
    let mut engine = FpgaEngine::new(t, host_ip, sgid);
    engine.set_signal_every(signal_every)?;
    let p = setup_connection(&mut engine, &host.params, &tc, staging, &mut random())?;
    to_host.send(&Message::Fpga(FpgaMsg { qpn: p.qpn, lkey: p.lkey, gid }))?;
    console.line(&format!(
        "fpga-emu: QP {:#08x} (GID {sgid}) -> host QP {:#08x} at {host_ip}, pmtu {}, {} frames on channels {:?}",
        p.qpn,
        host.params.qpn,
        pmtu.bytes(),
        stream.count,
        stream.channels
    ));
    from_host.expect("ready", a.handoff_timeout)?;
    let result = stream_frames(&mut engine, stream.clone(), a, Poller::new(mode), &console);
    let st = engine.stream_stats().cloned().unwrap_or_default();
    let errors = st.errors.len() as u64;
    let frames = st.completed - errors;
    let bytes = stream_bytes(&stream.sizes, frames);
    let sent = to_host.send(&Message::Done(DoneMsg { frames, bytes, errors }));
    let teardown = teardown_connection(&mut engine, &p);
    match sent {
        // A host that stopped at its own frame count may have closed a pipe
        // or FIFO already: it did not want the totals, and the stream is fine.
        Err(HandoffError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            console.line("fpga-emu: the host closed the hand-off before the done message");
        }
        r => r?,
    }
    let elapsed = result?;
    teardown?;
    console.line(&format!(
        "fpga-emu: {frames} frames, {bytes} bytes sent in {:.3} s: {}",
        elapsed.as_secs_f64(),
        rates(frames, bytes, ms(elapsed))
    ));
    if let Some(e) = st.errors.first() {
        console.line(&format!("fpga-emu: {errors} sends failed, first {e}"));
    }
    Ok(errors == 0 && frames == stream.count)
}

/// Pumps the engine until every frame completed (or one failed); returns
/// the time from the first post to the last completion.
fn stream_frames<T: Transport>(
    engine: &mut FpgaEngine<T>,
    stream: rctb_models::fpga::StreamConfig,
    a: &FpgaEmuArgs,
    mut poller: Poller,
    console: &Console,
) -> Result<Duration, CliError> {
    let count = stream.count;
    engine.start_stream(stream)?;
    let start = engine.transport().now();
    let cq = engine.cq().ok_or(rctb_models::fpga::EngineError::NotConnected)?;
    let mut last_print = start;
    let mut spins = 0u32;
    let mut retired = 0;
    loop {
        let due = engine.pump()?;
        let st = engine.stream_stats().expect("a started stream");
        if st.completed == st.posted && (st.completed == count || !st.errors.is_empty()) {
            return Ok(engine.transport().now() - start);
        }
        // Progress is a send retired; an empty turn idles per the mode (a
        // paced stream, `due` set, wakes by its next frame's time).
        let (posted, completed) = (st.posted, st.completed);
        let mut slept = false;
        if completed > retired {
            retired = completed;
            poller.progress();
        } else {
            let step = Duration::from_millis(50);
            let idle = poller.idle(engine.transport_mut(), &[cq], |t| {
                let now = t.now();
                due.unwrap_or(now + step).min(now + step)
            })?;
            slept = matches!(idle, Idle::Slept(_));
        }
        // The clock (a system call on some VMs) is read after a sleep and
        // every 4096 turns only.
        spins = spins.wrapping_add(1);
        if !slept && !spins.is_multiple_of(4096) {
            continue;
        }
        let now = engine.transport().now();
        if !a.interval.is_zero() && now - last_print >= a.interval {
            console.line(&format!("fpga-emu: {posted} frames posted, {completed} completed"));
            last_print = now;
        }
    }
}

//! The RoCEv2 receive server (`rctb_core::roce`) against the FPGA engine model
//! (`rctb_models::fpga`) on two simulator nodes: delivery, data,
//! counters, back-pressure, stop with frames held, reconnect and a stale PSN.

use proptest::prelude::*;
use rctb_core::roce::*;
use rctb_core::time::Duration;
use rctb_core::transport::*;
use rctb_models::fpga::*;
use rctb_sim::{LinkConfig, LinkFaults, NodeConfig, Sim, SimTransport};

const HOST_IP: &str = "10.0.0.1";
const FPGA_IP: &str = "10.0.0.2";

/// A deterministic PSN/key source (no ambient randomness).
fn rng(seed: u32) -> impl FnMut() -> u32 {
    let mut x = seed | 1;
    move || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    }
}

struct Rig {
    sim: Sim,
    engine: FpgaEngine<SimTransport>,
    host: rctb_sim::NodeId,
}

fn rig(seed: u64) -> Rig {
    rig_mtu(seed, Mtu::Mtu4096)
}

fn rig_mtu(seed: u64, mtu: Mtu) -> Rig {
    let sim = Sim::new(seed);
    let node = |name: &str, ip: &str| {
        sim.add_node({
            let mut node_config = NodeConfig::new(name, ip.parse().unwrap());
            node_config.mtu = mtu;
            node_config
        })
        .unwrap()
    };
    let host = node("host", HOST_IP);
    let fpga = node("fpga", FPGA_IP);
    let engine = FpgaEngine::new(sim.transport(fpga), HOST_IP.parse().unwrap(), 1);
    Rig { sim, engine, host }
}

fn server_cfg(depth: u32, max_payload: u32) -> ServerConfig {
    ServerConfig::builder(FPGA_IP.parse().unwrap(), "sim-host")
        .rx_queue_depth(depth)
        .max_payload(max_payload)
        .build()
        .unwrap()
}

/// §1's defaults except retry count 7, which rxe (and so the engine) never
/// spends: a consumer that holds every slot for a long stall costs the FPGA
/// sequence NAKs after its RNR NAKs, and with a budget of 3 those would end
/// the stream with RETRY_EXC_ERR.
fn tc() -> TransportConfig {
    TransportConfig::new(Mtu::Mtu4096, RnrTimer::default(), 7, 7).unwrap()
}

/// Creates a server on the host and connects the engine to it.
fn connect(r: &mut Rig, cfg: ServerConfig, seed: u32) -> (RoceServer<SimTransport>, FpgaParams) {
    let mut psn = rng(seed);
    let mut server = RoceServer::create(r.sim.transport(r.host), cfg, &mut psn).unwrap();
    let p = setup_connection(&mut r.engine, &server.host_params(), &tc(), 1 << 20, &mut psn).unwrap();
    server.complete_connection(p.qpn, &tc(), p.lkey).unwrap();
    (server, p)
}

/// What a consumer does with each frame.
#[derive(Clone, Copy, Debug)]
struct Consumer {
    /// Frames held before releasing them all.
    hold: usize,
    /// Virtual time spent per frame, holding it.
    delay: Duration,
}

/// Runs a stream to the end (or `limit` of virtual time), checking every
/// frame as it arrives; returns the ring positions received in order.
fn run(
    r: &mut Rig,
    server: &mut RoceServer<SimTransport>,
    stream: &StreamConfig,
    consumer: Consumer,
    limit: Duration,
) -> Vec<u32> {
    r.engine.start_stream(stream.clone()).unwrap();
    let end = r.sim.now() + limit;
    let mut seen = Vec::new();
    let mut held = Vec::new();
    let mut out = Vec::new();
    loop {
        let due = r.engine.pump().unwrap();
        server.poll(&mut out).unwrap();
        let got = !out.is_empty();
        for f in out.drain(..) {
            let ring = f.ring_position();
            let i = ring as usize;
            assert_eq!(f.channel(), stream.channels[i % stream.channels.len()], "ring {ring}");
            assert_eq!(f.len(), stream.sizes[i % stream.sizes.len()], "ring {ring}");
            let data = server.frame_data(&f).unwrap();
            assert!(data == prbs(f.channel(), ring, f.len() as usize), "payload of ring {ring} corrupted");
            seen.push(ring);
            held.push(f);
            if !consumer.delay.is_zero() {
                let t = r.engine.transport().now() + consumer.delay;
                r.engine.transport_mut().wait(&[], t).unwrap();
            }
            if held.len() >= consumer.hold {
                for f in held.drain(..) {
                    server.release(f).unwrap();
                }
            }
        }
        let st = r.engine.stream_stats().unwrap().clone();
        if st.completed == stream.count && seen.len() as u64 == stream.count || !st.errors.is_empty() {
            break;
        }
        if r.sim.now() >= end {
            break;
        }
        if !got {
            // Release what a batching consumer holds when the flow stalls.
            for f in held.drain(..) {
                server.release(f).unwrap();
            }
            let now = r.sim.now();
            let step = now + Duration::from_micros(50);
            let deadline = due.map_or(step, |d| d.min(step)).max(now + Duration::from_nanos(1));
            let cq = r.engine.cq().unwrap();
            r.engine.transport_mut().wait(&[cq], deadline).unwrap();
        }
    }
    for f in held {
        server.release(f).unwrap();
    }
    seen
}

fn stream(count: u64) -> StreamConfig {
    StreamConfig {
        channels: vec![0, 1, 7, 255],
        sizes: vec![1, 100, 4096, 777],
        count,
        gap: Duration::ZERO,
        window: 16,
        payload: Payload::Prbs,
    }
}

#[test]
fn frames_arrive_once_in_order_with_exact_counters() {
    let mut r = rig(1);
    let (mut server, _) = connect(&mut r, server_cfg(64, 4096), 7);
    let s = stream(400);
    let seen = run(&mut r, &mut server, &s, Consumer { hold: 1, delay: Duration::ZERO }, Duration::from_secs(5));
    assert_eq!(seen, (0..400).collect::<Vec<u32>>());
    let bytes: u64 = (0..400).map(|i| s.sizes[i % 4] as u64).sum();
    let c = server.counters();
    assert_eq!((c.frames, c.bytes), (400, bytes));
    assert_eq!(r.engine.stream_stats().unwrap().errors, vec![]);
    let st = server.status();
    assert_eq!((st.rx_frame_count, st.rx_byte_count), (400, bytes));
    assert_eq!(st.fpga_gid.to_string(), "0000:0000:0000:0000:0000:ffff:0a00:0002");
    assert_eq!(st.host_ip, Some(HOST_IP.parse().unwrap()));
    assert_eq!(server.gid_index(), 1, "detection picks the IPv4-mapped RoCE v2 GID");
}

#[test]
fn slow_consumer_back_pressures_through_rnr_without_loss() {
    let mut r = rig(2);
    // 4 slots, a consumer that holds 4 frames and takes 250 us over each.
    let (mut server, _) = connect(&mut r, server_cfg(4, 4096), 9);
    let s = StreamConfig { window: 8, ..stream(60) };
    let consumer = Consumer { hold: 4, delay: Duration::from_micros(250) };
    let seen = run(&mut r, &mut server, &s, consumer, Duration::from_secs(30));
    assert_eq!(seen, (0..60).collect::<Vec<u32>>());
    assert_eq!(server.counters().frames, 60);
    assert!(r.sim.stats().rnr_naks > 0, "a full receive queue must answer RNR NAK: {:?}", r.sim.stats());
}

#[test]
fn channel_view_keeps_one_channel_and_releases_the_rest() {
    let mut r = rig(3);
    let (mut server, _) = connect(&mut r, server_cfg(32, 4096), 11);
    r.engine.start_stream(StreamConfig { count: 40, window: 8, ..stream(40) }).unwrap();
    let ch = Channel::new(7).unwrap();
    let mut got = Vec::new();
    let end = r.sim.now() + Duration::from_secs(2);
    while r.sim.now() < end && r.engine.stream_stats().unwrap().completed < 40 {
        r.engine.pump().unwrap();
        let mut out = Vec::new();
        server.poll_channel(ch, &mut out).unwrap();
        for f in out {
            got.push(f.ring_position());
            server.release(f).unwrap();
        }
        let cq = r.engine.cq().unwrap();
        let t = r.sim.now() + Duration::from_micros(50);
        r.engine.transport_mut().wait(&[cq], t).unwrap();
    }
    let mut out = Vec::new();
    server.poll_channel(ch, &mut out).unwrap();
    got.extend(out.iter().map(|f| f.ring_position()));
    assert_eq!(got, (0..40).filter(|i| i % 4 == 2).collect::<Vec<u32>>());
    assert_eq!(server.counters().filtered_out, 30);
    assert_eq!(Channel::new(256).unwrap_err().to_string(), "channel 256 is out of range: channels are 0..=255");
}

#[test]
fn complete_connection_is_once_only() {
    let mut r = rig(4);
    let (mut server, p) = connect(&mut r, server_cfg(8, 1024), 13);
    assert_eq!(server.complete_connection(p.qpn, &tc(), p.lkey), Err(RoceError::AlreadyConnected));
    let mut psn = rng(5);
    let mut fresh = RoceServer::create(r.sim.transport(r.host), server_cfg(8, 1024), &mut psn).unwrap();
    assert_eq!(fresh.poll(&mut Vec::new()), Err(RoceError::NotConnected));
    fresh.stop().unwrap();
    assert_eq!(fresh.complete_connection(p.qpn, &tc(), p.lkey), Err(RoceError::Stopped));
}

/// rogue PR #1276: freeing the slab at stop while frames pointed into it.
#[test]
fn frames_held_at_stop_stay_readable_until_released() {
    let mut r = rig(5);
    let before = r.sim.live_resources();
    let (mut server, p) = connect(&mut r, server_cfg(16, 4096), 17);
    let s = StreamConfig { count: 8, ..stream(8) };
    r.engine.start_stream(s.clone()).unwrap();
    let mut frames = Vec::new();
    let end = r.sim.now() + Duration::from_secs(1);
    while frames.len() < 8 && r.sim.now() < end {
        r.engine.pump().unwrap();
        let t = r.sim.now() + Duration::from_micros(50);
        server.wait_frames(&mut frames, t).unwrap();
    }
    assert_eq!(frames.len(), 8);
    server.stop().unwrap();
    teardown_connection(&mut r.engine, &p).unwrap();
    assert_eq!(server.poll(&mut Vec::new()), Err(RoceError::Stopped));
    // QP and CQ are gone, the slab is not.
    assert_eq!(r.sim.live_resources().mrs, before.mrs + 1);
    for f in frames {
        let data = server.frame_data(&f).unwrap();
        assert!(data == prbs(f.channel(), f.ring_position(), f.len() as usize));
        server.release(f).unwrap();
    }
    assert_eq!(server.held_frames(), 0);
    assert_eq!(r.sim.live_resources(), before, "the last release frees slab and PD");
}

/// rogue PR #1268: a reconnect must reset the FPGA; a stale transmit PSN is
/// caught: the host sees nothing and the FPGA's sends fail RETRY_EXC_ERR.
#[test]
fn stop_then_reconnect_works_and_a_stale_fpga_psn_is_caught() {
    let mut r = rig(6);
    let before = r.sim.live_resources();
    let (mut first, p) = connect(&mut r, server_cfg(16, 4096), 19);
    let old = first.host_params();
    let c = Consumer { hold: 1, delay: Duration::ZERO };
    assert_eq!(run(&mut r, &mut first, &stream(20), c, Duration::from_secs(2)).len(), 20);
    first.stop().unwrap();
    teardown_connection(&mut r.engine, &p).unwrap();
    drop(first);
    assert_eq!(r.sim.live_resources(), before);

    // Second session with a proper setup (soft reset first): works.
    let (mut second, p2) = connect(&mut r, server_cfg(16, 4096), 23);
    assert_ne!(second.host_params().sq_psn, old.sq_psn);
    assert_eq!(run(&mut r, &mut second, &stream(20), c, Duration::from_secs(2)).len(), 20);
    second.stop().unwrap();
    teardown_connection(&mut r.engine, &p2).unwrap();
    drop(second);

    // Third session where the FPGA keeps the previous session's transmit PSN.
    let mut psn = rng(29);
    let mut third = RoceServer::create(r.sim.transport(r.host), server_cfg(16, 4096), &mut psn).unwrap();
    let stale = HostParams { sq_psn: old.sq_psn, ..third.host_params() };
    // A finite retry budget, so the silence ends in RETRY_EXC_ERR (with 7 the
    // FPGA would retry for ever, as rxe does).
    let tc6 = TransportConfig::new(Mtu::Mtu4096, RnrTimer::default(), 7, 6).unwrap();
    let p3 = setup_connection(&mut r.engine, &stale, &tc6, 1 << 20, &mut psn).unwrap();
    third.complete_connection(p3.qpn, &tc6, p3.lkey).unwrap();
    let seen = run(&mut r, &mut third, &stream(4), c, Duration::from_secs(60));
    assert!(seen.is_empty(), "the host must accept nothing out of sequence");
    assert_eq!(third.counters().frames, 0);
    let errors = &r.engine.stream_stats().unwrap().errors;
    assert_eq!(errors.first(), Some(&WcStatus::RetryExcErr), "{errors:?}");
}

#[test]
fn engine_setup_rolls_back_in_reverse_on_failure() {
    let r = rig(7);
    let before = r.sim.live_resources();
    // An engine sourcing from a GID index the node does not have: RTR fails.
    let fpga = r.sim.node("fpga").unwrap();
    let mut engine = FpgaEngine::new(r.sim.transport(fpga), HOST_IP.parse().unwrap(), 9);
    let mut psn = rng(31);
    let server = RoceServer::create(r.sim.transport(r.host), server_cfg(8, 1024), &mut psn).unwrap();
    let with_server = r.sim.live_resources();
    let err = setup_connection(&mut engine, &server.host_params(), &tc(), 4096, &mut psn).unwrap_err();
    assert_eq!(err, SetupError::Refused { step: "RTR" });
    assert_eq!(r.sim.live_resources(), with_server, "engine objects rolled back");
    // Ranges are checked before any register write.
    let bad = HostParams { qpn: 1 << 24, ..server.host_params() };
    assert!(matches!(setup_connection(&mut engine, &bad, &tc(), 4096, &mut psn), Err(SetupError::Invalid(_))));
    drop(server);
    assert_eq!(r.sim.live_resources(), before);
}

/// Bad input is refused before the first register write: no soft reset, no
/// TX word, no object.
#[test]
fn engine_setup_validates_before_writing() {
    let mut r = rig(10);
    let mut psn = rng(41);
    let server = RoceServer::create(r.sim.transport(r.host), server_cfg(8, 1024), &mut psn).unwrap();
    let before = r.sim.live_resources();
    for bad in
        [HostParams { qpn: 1 << 24, ..server.host_params() }, HostParams { mr_len: 1 << 32, ..server.host_params() }]
    {
        assert!(matches!(setup_connection(&mut r.engine, &bad, &tc(), 4096, &mut psn), Err(SetupError::Invalid(_))));
    }
    assert!(matches!(
        setup_connection(&mut r.engine, &server.host_params(), &tc(), 0, &mut psn),
        Err(SetupError::Invalid(_))
    ));
    for i in 0..rctb_core::wire::surf::TX_REGS as u32 {
        assert_eq!(r.engine.read(rctb_core::wire::surf::REG_TX + 4 * i), Ok(0));
    }
    assert_eq!(r.sim.live_resources(), before);
}

/// The fix of rogue PR #1268: setup starts with a soft reset, so setting up
/// again without a teardown (a reloaded host) replaces the old session.
#[test]
fn setup_without_teardown_soft_resets_the_previous_session() {
    let mut r = rig(11);
    let (mut first, _) = connect(&mut r, server_cfg(8, 4096), 43);
    let c = Consumer { hold: 1, delay: Duration::ZERO };
    assert_eq!(run(&mut r, &mut first, &stream(10), c, Duration::from_secs(2)).len(), 10);
    drop(first);
    let with_engine = r.sim.live_resources();
    let (mut second, _) = connect(&mut r, server_cfg(8, 4096), 47);
    assert_eq!(run(&mut r, &mut second, &stream(10), c, Duration::from_secs(2)).len(), 10);
    drop(second);
    assert_eq!(r.sim.live_resources(), with_engine, "the old engine objects are gone");
}

#[test]
fn engine_registers_reject_unknown_addresses() {
    let r = rig(8);
    let mut e = r.engine;
    assert_eq!(e.write(0x10, 1), Err(EngineError::BadRegister(0x10)));
    assert_eq!(e.read(0xF01), Err(EngineError::BadRegister(0xF01)));
    assert_eq!(e.read(rctb_core::wire::surf::REG_CONTROL), Ok(0));
}

/// rxe's active MTU follows the netdev (1500 gives 1024): a configured 4096
/// is clamped to the port's, and frames larger than one packet still arrive.
#[test]
fn path_mtu_is_clamped_to_the_ports_active_mtu() {
    let mut r = rig_mtu(9, Mtu::Mtu1024);
    let mut psn = rng(37);
    let mut server = RoceServer::create(r.sim.transport(r.host), server_cfg(16, 4096), &mut psn).unwrap();
    assert_eq!(server.path_mtu(&tc()), Mtu::Mtu1024);
    let fpga_tc = TransportConfig::new(server.path_mtu(&tc()), RnrTimer::default(), 7, 7).unwrap();
    let p = setup_connection(&mut r.engine, &server.host_params(), &fpga_tc, 1 << 20, &mut psn).unwrap();
    server.complete_connection(p.qpn, &tc(), p.lkey).unwrap();
    let c = Consumer { hold: 1, delay: Duration::ZERO };
    assert_eq!(run(&mut r, &mut server, &stream(40), c, Duration::from_secs(2)), (0..40).collect::<Vec<u32>>());
}

#[test]
fn prbs_depends_on_channel_and_sequence() {
    assert_eq!(prbs(1, 2, 64), prbs(1, 2, 64));
    assert_ne!(prbs(1, 2, 64), prbs(2, 2, 64));
    assert_ne!(prbs(1, 2, 64), prbs(1, 3, 64));
    assert_eq!(&prbs(1, 2, 100)[..64], &prbs(1, 2, 64)[..]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random sizes, channels, pacing and consumer behaviour: every frame is
    /// delivered exactly once, in order, with its data, and the counters equal
    /// what was sent.
    #[test]
    fn every_frame_once_in_order_verified(
        seed in any::<u64>(),
        channels in prop::collection::vec(any::<u8>(), 1..5),
        sizes in prop::collection::vec(1u32..=2048, 1..6),
        count in 1u64..120,
        depth in 1u32..24,
        window in 1u32..=16,
        gap_us in 0u64..20,
        hold in 1usize..6,
        delay_us in 0u64..300,
    ) {
        let mut r = rig(seed);
        let (mut server, _) = connect(&mut r, server_cfg(depth, 2048), seed as u32);
        let s = StreamConfig { channels, sizes, count, gap: Duration::from_micros(gap_us), window, payload: Payload::Prbs };
        let consumer = Consumer { hold, delay: Duration::from_micros(delay_us) };
        let seen = run(&mut r, &mut server, &s, consumer, Duration::from_secs(120));
        prop_assert_eq!(&seen, &(0..count as u32).collect::<Vec<u32>>());
        let bytes: u64 = (0..count as usize).map(|i| s.sizes[i % s.sizes.len()] as u64).sum();
        let c = server.counters();
        prop_assert_eq!((c.frames, c.bytes), (count, bytes));
        prop_assert_eq!((c.bad_wr_id, c.errors, c.wrong_opcode, c.bad_length), (0, 0, 0, 0));
        let st = r.engine.stream_stats().unwrap();
        prop_assert!(st.errors.is_empty(), "{:?}", st.errors);
        prop_assert_eq!(st.bytes, bytes);
    }
}

// ---- cost knobs: each changes the cost, never what arrives ----

#[test]
fn a_repost_batch_delivers_every_frame_once_and_keeps_the_queue_fed() {
    let depth = 64;
    for k in [1, 2, 7, 16, 63, 64] {
        let mut r = rig(40 + k as u64);
        let (mut server, _) = connect(&mut r, server_cfg(depth, 4096), 11);
        server.set_repost_batch(k).unwrap();
        assert_eq!(server.repost_batch(), k);
        let s = stream(500);
        let seen = run(&mut r, &mut server, &s, Consumer { hold: 1, delay: Duration::ZERO }, Duration::from_secs(5));
        assert_eq!(seen, (0..500).collect::<Vec<u32>>(), "repost batch {k}");
        assert_eq!(server.counters().frames, 500, "repost batch {k}");
        assert_eq!(r.sim.stats().rnr_naks, 0, "repost batch {k}: the receive queue ran dry");
        // An empty poll gives back what a batch held.
        let mut out = Vec::new();
        assert_eq!(server.poll(&mut out).unwrap(), 0);
        assert_eq!(server.unposted_slots(), 0, "repost batch {k}");
        assert_eq!(server.held_frames(), 0);
    }
}

#[test]
fn a_repost_batch_with_a_holding_consumer_loses_nothing() {
    // A consumer that holds 8 frames at a time, with re-posts in batches of 5:
    // slots go back in other groupings than they were taken.
    let mut r = rig(50);
    let (mut server, _) = connect(&mut r, server_cfg(16, 4096), 12);
    server.set_repost_batch(5).unwrap();
    let s = StreamConfig { window: 8, ..stream(300) };
    let seen = run(&mut r, &mut server, &s, Consumer { hold: 8, delay: Duration::ZERO }, Duration::from_secs(30));
    assert_eq!(seen, (0..300).collect::<Vec<u32>>());
    assert_eq!(server.counters().frames, 300);
}

#[test]
fn a_repost_batch_outside_one_to_depth_is_refused_by_name() {
    let mut r = rig(51);
    let (mut server, _) = connect(&mut r, server_cfg(8, 4096), 13);
    for k in [0, 9, u32::MAX] {
        match server.set_repost_batch(k) {
            Err(RoceError::Config(e)) => assert_eq!((e.field, e.value), ("repost_batch", k as u64)),
            other => panic!("repost batch {k}: {other:?}"),
        }
    }
    assert_eq!(server.repost_batch(), 1, "a refused value changes nothing");
    server.set_repost_batch(8).unwrap();
}

/// The engine with one send in `n` signalled streams `count` frames.
fn signalled_stream(seed: u64, n: u32, count: u64, window: u32) {
    let mut r = rig(seed);
    let (mut server, _) = connect(&mut r, server_cfg(64, 4096), 14);
    r.engine.set_signal_every(n).unwrap();
    assert_eq!(r.engine.signal_every(), n);
    let s = StreamConfig { window, ..stream(count) };
    let seen = run(&mut r, &mut server, &s, Consumer { hold: 1, delay: Duration::ZERO }, Duration::from_secs(10));
    let what = format!("signal every {n}, {count} frames, window {window}");
    assert_eq!(seen, (0..count as u32).collect::<Vec<u32>>(), "{what}");
    let st = r.engine.stream_stats().unwrap();
    assert_eq!((st.posted, st.completed), (count, count), "{what}");
    assert_eq!(st.errors, vec![], "{what}");
    let bytes: u64 = (0..count).map(|i| s.sizes[i as usize % 4] as u64).sum();
    assert_eq!(st.bytes, bytes, "{what}");
}

#[test]
fn signalling_one_send_in_n_completes_exactly_the_stream() {
    for (seed, n, count, window) in [
        (60, 1, 100, 16),
        (61, 4, 100, 16),
        (62, 3, 100, 16), // 100 is not a multiple of 3: the last send is signalled on its own
        (63, 16, 100, 16),
        (64, 16, 7, 16), // fewer frames than one period
        (65, 5, 101, 8),
        (66, 1, 1, 1),
    ] {
        signalled_stream(seed, n, count, window);
    }
}

#[test]
fn signalled_streams_survive_packet_loss() {
    for (seed, n) in [(70, 1), (71, 4), (72, 7)] {
        let mut r = rig(seed);
        let mut faults = LinkFaults::default();
        faults.drop = 0.03;
        let mut link = LinkConfig::default();
        link.faults = faults;
        r.sim.set_default_link(link);
        let (mut server, _) = connect(&mut r, server_cfg(64, 4096), 15);
        r.engine.set_signal_every(n).unwrap();
        let s = stream(200);
        let seen = run(&mut r, &mut server, &s, Consumer { hold: 1, delay: Duration::ZERO }, Duration::from_secs(60));
        assert_eq!(seen, (0..200).collect::<Vec<u32>>(), "signal every {n}");
        let st = r.engine.stream_stats().unwrap();
        assert_eq!((st.posted, st.completed, st.errors.len()), (200, 200, 0), "signal every {n}");
        assert!(r.sim.stats().dropped_loss > 0, "the fault did drop packets");
    }
}

#[test]
fn a_failed_unsignalled_stream_retires_every_send() {
    // The host goes away mid-stream: the send in flight fails after its
    // retries and every later one flushes; unsignalled or not, each is
    // accounted for once.
    let mut r = rig(73);
    let tc = TransportConfig::new(Mtu::Mtu4096, RnrTimer::default(), 7, 2).unwrap();
    let mut psn = rng(16);
    let mut server = RoceServer::create(r.sim.transport(r.host), server_cfg(64, 4096), &mut psn).unwrap();
    let p = setup_connection(&mut r.engine, &server.host_params(), &tc, 1 << 20, &mut psn).unwrap();
    server.complete_connection(p.qpn, &tc, p.lkey).unwrap();
    r.engine.set_signal_every(4).unwrap();
    r.engine.start_stream(stream(1000)).unwrap();
    let cq = r.engine.cq().unwrap();
    let mut out = Vec::new();
    let mut stopped = false;
    for _ in 0..100_000 {
        r.engine.pump().unwrap();
        if !stopped {
            server.poll(&mut out).unwrap();
            for f in out.drain(..) {
                server.release(f).unwrap();
            }
        }
        let st = r.engine.stream_stats().unwrap().clone();
        if !stopped && st.completed >= 100 {
            server.stop().unwrap();
            stopped = true;
        }
        if !st.errors.is_empty() && st.completed == st.posted {
            break;
        }
        let now = r.sim.now();
        r.engine.transport_mut().wait(&[cq], now + Duration::from_millis(10)).unwrap();
    }
    let st = r.engine.stream_stats().unwrap();
    assert!(stopped);
    assert!(!st.errors.is_empty(), "the stream failed");
    assert_eq!(st.completed, st.posted, "every posted send retired once");
    assert!(st.posted < 1000);
}

#[test]
fn a_signalling_period_outside_one_to_window_is_refused_by_name() {
    let mut r = rig(74);
    let (_server, _) = connect(&mut r, server_cfg(8, 4096), 17);
    match r.engine.set_signal_every(0) {
        Err(EngineError::Stream(e)) => assert_eq!((e.field, e.value), ("signal_every", 0)),
        other => panic!("{other:?}"),
    }
    r.engine.set_signal_every(9).unwrap();
    match r.engine.start_stream(StreamConfig { window: 8, ..stream(10) }) {
        Err(EngineError::Stream(e)) => assert_eq!((e.field, e.value), ("signal_every", 9)),
        other => panic!("{other:?}"),
    }
    assert!(r.engine.stream_stats().is_none(), "nothing started");
}

/// Streams `count` frames with the host waiting in `mode` (the engine
/// side lets virtual time pass when the host spins); returns the rings
/// received and how often the host slept.
fn polled_stream(seed: u64, mode: PollMode, count: u64) -> (Vec<u32>, RxCounters, u64) {
    let mut r = rig(seed);
    let (mut server, _) = connect(&mut r, server_cfg(32, 4096), 18);
    let s = stream(count);
    r.engine.start_stream(s.clone()).unwrap();
    let (ecq, hcq) = (r.engine.cq().unwrap(), server.cq().unwrap());
    let mut poller = Poller::new(mode);
    let (mut seen, mut out) = (Vec::new(), Vec::new());
    let end = r.sim.now() + Duration::from_secs(10);
    while r.sim.now() < end {
        let due = r.engine.pump().unwrap();
        let n = server.poll(&mut out).unwrap();
        for f in out.drain(..) {
            assert!(server.frame_data(&f).unwrap() == prbs(f.channel(), f.ring_position(), f.len() as usize));
            seen.push(f.ring_position());
            server.release(f).unwrap();
        }
        let st = r.engine.stream_stats().unwrap();
        if seen.len() as u64 == count && st.completed == count {
            break;
        }
        if n > 0 {
            poller.progress();
            continue;
        }
        let step = Duration::from_micros(20);
        if poller.idle(server.transport_mut(), &[hcq], |t| t.now() + step).unwrap() == Idle::Spun {
            // A spinning host takes no virtual time: the FPGA's side does.
            let now = r.sim.now();
            r.engine.transport_mut().wait(&[ecq], due.map_or(now + step, |d| d.min(now + step))).unwrap();
        }
    }
    (seen, server.counters(), poller.sleeps())
}

#[test]
fn every_poll_mode_delivers_the_same_frames() {
    let want: Vec<u32> = (0..300).collect();
    let (busy, cb, sleeps_busy) = polled_stream(80, PollMode::Busy, 300);
    let (event, ce, sleeps_event) = polled_stream(80, PollMode::Event, 300);
    let (adaptive, ca, sleeps_adaptive) = polled_stream(80, PollMode::Adaptive { spin: 4 }, 300);
    assert_eq!(busy, want);
    assert_eq!(event, want);
    assert_eq!(adaptive, want);
    assert_eq!(cb, ce);
    assert_eq!(ca, ce);
    assert_eq!(sleeps_busy, 0, "busy polling never sleeps");
    assert!(sleeps_event > 0 && sleeps_adaptive > 0);
}

//! `rctb rc-session selftest` on the simulator: the same code the VM hook
//! runs on rxe (ci/vm/checks.d/rcsession.sh), so its logic is covered
//! without hardware.

use rctb_core::rcsession::{ServerConfig, Usage};
use rctb_core::wire::hipobj::Op;
use rctb_scenario::pattern::StreamPattern;
use rctb_scenario::session_selftest::{OpMix, SelftestConfig, SelftestReport, parse_size, run_sim, transfer_shape};

fn replay(cfg: &SelftestConfig) -> String {
    format!(
        "seed {}; replay: rctb rc-session selftest --backend sim --transfers {} --max-size {} --depth {} --seed {}",
        cfg.seed, cfg.transfers, cfg.max_size, cfg.depth, cfg.seed
    )
}

fn passes(cfg: &SelftestConfig) -> SelftestReport {
    let r = run_sim(cfg).unwrap_or_else(|e| panic!("{e} ({})", replay(cfg)));
    assert!(r.passed(cfg), "{:?}\n{}({})", r.failures(cfg), r.text(), replay(cfg));
    r
}

#[test]
fn mixed_gets_and_puts_from_one_byte_to_the_maximum_arrive_intact() {
    let cfg = SelftestConfig { transfers: 60, max_size: 1 << 20, seed: 7, ..SelftestConfig::default() };
    let r = passes(&cfg);
    assert_eq!(r.transfers(), 60);
    assert!(r.gets >= 10 && r.puts >= 10, "{r:?}");
    assert_eq!((r.smallest_get, r.largest_get), (Some(1), 1 << 20));
    assert_eq!((r.smallest_put, r.largest_put), (Some(1), 1 << 20));
    assert_eq!((r.mismatches, r.busy), (0, 0));
    assert_eq!(r.usage_after.sessions, 0);
    assert_eq!(r.usage_after.staging_bytes, 0);
    assert_eq!(r.usage_after.qps, 0);
    assert!(r.elapsed.as_nanos() > 0);
    // the bytes are the sum of the drawn sizes, each transfer once
    let p = StreamPattern::new(cfg.seed, "rc-session-selftest");
    let want: u64 = (0..cfg.transfers).map(|i| transfer_shape(&cfg, &p, i).1).sum();
    assert_eq!(r.bytes, want);
}

#[test]
fn several_sessions_in_flight_keep_their_own_data() {
    let cfg = SelftestConfig { transfers: 48, max_size: 256 << 10, depth: 6, seed: 3, ..SelftestConfig::default() };
    let r = passes(&cfg);
    assert_eq!(r.transfers(), 48);
    // in flight at once: faster in virtual time than one at a time
    let one = passes(&SelftestConfig { depth: 1, ..cfg.clone() });
    assert_eq!(one.bytes, r.bytes);
    assert!(r.elapsed < one.elapsed, "depth 6 {:?} vs depth 1 {:?}", r.elapsed, one.elapsed);
}

#[test]
fn a_fixed_size_get_benchmark_moves_exactly_its_bytes() {
    let cfg = SelftestConfig {
        transfers: 12,
        fixed_size: Some(1 << 20),
        ops: OpMix::Get,
        verify: false,
        depth: 2,
        // ignored on the simulator, which would otherwise never move
        busy_poll: true,
        ..SelftestConfig::default()
    };
    let r = passes(&cfg);
    assert_eq!((r.gets, r.puts, r.bytes), (12, 0, 12 << 20));
    assert!(r.mib_per_sec() > 0.0);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let cfg = SelftestConfig { transfers: 20, max_size: 64 << 10, seed: 11, ..SelftestConfig::default() };
    let (a, b) = (passes(&cfg), passes(&cfg));
    assert_eq!(a, b);
}

#[test]
fn a_server_that_refuses_every_prepare_fails_the_run() {
    // zero sessions allowed: every PREPARE is refused, so nothing moves and
    // the report must say so (the selftest cannot pass by doing nothing)
    let mut server = ServerConfig::default();
    server.limits.max_sessions = 0;
    let cfg = SelftestConfig { transfers: 5, max_size: 4096, server, ..SelftestConfig::default() };
    let r = run_sim(&cfg).expect("it runs");
    assert_eq!(r.transfers(), 0);
    assert_eq!(r.errors.len(), 5, "{:?}", r.errors);
    assert!(r.errors[0].contains("PREPARE"), "{:?}", r.errors);
    let f = r.failures(&cfg);
    assert!(f.iter().any(|l| l.contains("0 of 5 transfers")), "{f:?}");
    assert!(!r.passed(&cfg));
}

#[test]
fn failures_name_mismatches_and_what_was_held() {
    let cfg = SelftestConfig { transfers: 2, ..SelftestConfig::default() };
    let r = SelftestReport {
        gets: 1,
        puts: 1,
        mismatches: 1,
        usage_after: Usage { sessions: 1, leaked_mrs: 1, ..Usage::default() },
        ..SelftestReport::default()
    };
    let f = r.failures(&cfg).join("\n");
    assert!(f.contains("1 transfers with data that differs"), "{f}");
    assert!(f.contains("held after the run"), "{f}");
    assert!(f.contains("leaked 1 MRs"), "{f}");
}

#[test]
fn sizes_start_at_the_edges_then_spread_log_uniformly() {
    let cfg = SelftestConfig { transfers: 1000, ..SelftestConfig::default() };
    let p = StreamPattern::new(1, "rc-session-selftest");
    let shapes: Vec<(Op, u64)> = (0..cfg.transfers).map(|i| transfer_shape(&cfg, &p, i)).collect();
    assert_eq!(&shapes[..4], &[(Op::Get, 1), (Op::Put, 1), (Op::Get, 8 << 20), (Op::Put, 8 << 20)]);
    assert!(shapes.iter().all(|&(_, s)| (1..=8 << 20).contains(&s)));
    // 23 doublings from 1 B to 8 MiB (then 8 MiB itself): every one of
    // them is drawn, none more than twice its share
    let mut per_doubling = [0u32; 24];
    for &(_, s) in &shapes[4..] {
        per_doubling[(63 - s.leading_zeros()) as usize] += 1;
    }
    let share = 996 / 23;
    assert!(per_doubling[..23].iter().all(|&n| n > share / 2 && n < 2 * share), "{per_doubling:?}");
    let gets = shapes.iter().filter(|s| s.0 == Op::Get).count();
    assert!((400..600).contains(&gets), "{gets} GETs of 1000");
    // a single operation: the edges are its own first two
    let get = SelftestConfig { ops: OpMix::Get, ..cfg.clone() };
    assert_eq!(transfer_shape(&get, &p, 0), (Op::Get, 1));
    assert_eq!(transfer_shape(&get, &p, 1), (Op::Get, 8 << 20));
    // draw_max lowers the drawn sizes, not the edges
    let capped = SelftestConfig { draw_max: Some(256 << 10), ..cfg.clone() };
    let c: Vec<u64> = (0..cfg.transfers).map(|i| transfer_shape(&capped, &p, i).1).collect();
    assert_eq!(&c[..4], &[1, 1, 8 << 20, 8 << 20]);
    assert!(c[4..].iter().all(|&s| (1..=256 << 10).contains(&s)));
    assert!(c[4..].iter().any(|&s| s > 128 << 10), "the top doubling is drawn");
    let fixed = SelftestConfig { fixed_size: Some(4096), ..cfg };
    assert!((0..50).all(|i| transfer_shape(&fixed, &p, i).1 == 4096));
}

#[test]
fn sizes_parse_with_binary_units() {
    assert_eq!(parse_size("1"), Ok(1));
    assert_eq!(parse_size("8MiB"), Ok(8 << 20));
    assert_eq!(parse_size("8M"), Ok(8 << 20));
    assert_eq!(parse_size("4KiB"), Ok(4096));
    assert_eq!(parse_size("1GiB"), Ok(1 << 30));
    assert_eq!(parse_size("512B"), Ok(512));
    assert!(parse_size("8MB").unwrap_err().contains("unknown unit"));
    assert!(parse_size("MiB").unwrap_err().contains("a number"));
    assert!(parse_size("99999999999999999999").unwrap_err().contains("a size is a number"));
    assert!(parse_size("18446744073709551615GiB").unwrap_err().contains("too large"));
}

#[test]
fn the_command_prints_counters_and_a_result_line() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rctb"))
        .args(["rc-session", "selftest", "--transfers", "8", "--max-size", "64KiB", "--seed", "5"])
        .args(["--bench", "write_bw-64KiB", "--bench-tool", "rctb-session", "--reps", "2"])
        .output()
        .expect("rctb runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches("RESULT PASS transfers=8 ").count(), 2, "{text}");
    assert_eq!(text.lines().filter(|l| l.starts_with("BENCH write_bw-64KiB rctb-session ")).count(), 2, "{text}");
    assert!(text.contains("sizes: GET 1..65536 bytes, PUT 1..65536 bytes"), "{text}");
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_rctb"))
        .args(["rc-session", "selftest", "--backend", "verbs", "--device", "rxe1"])
        .output()
        .expect("rctb runs");
    assert_eq!(bad.status.code(), Some(2));
}

//! The conformance suite (crate `rctb-conformance`) between two real RDMA
//! devices of this machine (rxe1 and rxe0 in the VM harness, or two ports of
//! a NIC):
//!
//! ```sh
//! RCTB_RDMA_DEVICE=rxe1 RCTB_RDMA_PEER_DEVICE=rxe0 cargo test -p rctb-hw --features verbs --test conformance
//! ```
//!
//! `RCTB_RDMA_DEVICE` requests, `RCTB_RDMA_PEER_DEVICE` responds. As with
//! `hw_traffic`, without both variables at build time the test is
//! `#[ignore]`d; run with `--include-ignored` but without them, it prints
//! why and skips. The VM harness runs the same cases through `rctb
//! conformance --backend verbs`.

use rctb_hw::VerbsTransport;

#[test]
#[cfg_attr(not(rctb_rdma_hw), ignore = "needs RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE at build time")]
fn every_conformance_case_passes_on_verbs_devices_when_named() {
    let named = |k| std::env::var(k).ok().filter(|v| !v.is_empty());
    let (Some(device), Some(peer)) = (named("RCTB_RDMA_DEVICE"), named("RCTB_RDMA_PEER_DEVICE")) else {
        eprintln!("SKIP: set RCTB_RDMA_DEVICE and RCTB_RDMA_PEER_DEVICE (e.g. rxe1 rxe0) to run the suite on verbs");
        return;
    };
    let mut a = VerbsTransport::open(&device).unwrap_or_else(|e| panic!("open the requester's device {device}: {e}"));
    let mut b = VerbsTransport::open(&peer).unwrap_or_else(|e| panic!("open the responder's device {peer}: {e}"));
    let results = rctb_conformance::run(&mut a, &mut b, "", &mut |r| eprintln!("{}", r.line()));
    let failed: Vec<String> = results.iter().filter(|r| !r.passed()).map(|r| r.line()).collect();
    assert!(failed.is_empty(), "conformance failures on {device} -> {peer}:\n{}", failed.join("\n"));
    assert_eq!(results.len(), rctb_conformance::cases::<VerbsTransport>().len());
}

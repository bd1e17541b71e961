//! A small, bounded version of `rctb object load`: concurrent clients run
//! PREPARE + control-plane-only READY over real HTTP; no request may fail
//! and no session may be left (no timing is asserted).

mod common;

use common::{ALICE, Rig, RigOptions};
use rctb_gateway::http::GatewayOptions;
use rctb_gateway::load::{LoadOptions, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_control_plane_load_has_no_errors() {
    // The load's READYs use QPN 0: the server runs in the test mode.
    let mut gateway = GatewayOptions::default();
    gateway.control_plane_only = true;
    let rig = Rig::start(RigOptions { clients: 0, gateway, ..RigOptions::default() }).await;
    let opts = LoadOptions { clients: 16, prepares: 600, size: 4096, bucket: "load".into() };
    let report = run(&opts, |_| {
        let cp = rig.control_plane(ALICE);
        std::sync::Arc::try_unwrap(cp).unwrap()
    })
    .await;
    assert_eq!(report.errors, Default::default(), "{:?}", report.lines());
    assert_eq!((report.ok, report.prepare.count, report.ready.count), (600, 600, 600));
    assert!(report.prepare.p50 <= report.prepare.p99 && report.prepare.p99 <= report.prepare.max);
    assert_eq!(rig.live_sessions().await, 0);
    assert_eq!(rig.gw.engine.call(|s| s.usage().staging_bytes).await.unwrap(), 0);
}

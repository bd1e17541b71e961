//! Simulator bugs found while building the testbench, as minimal
//! reproductions. They are `#[ignore]`d until rctb-sim fixes them; run with
//! `cargo test -p rctb --test sim_bugs -- --ignored`.

use rctb::runner;
use rctb::scenario::Scenario;

/// RDMA CM between ports of different MTUs: the passive side's QP gets the
/// smaller MTU (min of the REQ's and its own), but the active side keeps its
/// own port MTU, as the REP carries none (sim/src/cm.rs, `CmMsg::Rep`
/// handling passes `c.mtu`). The two QPs then segment and reassemble at
/// different path MTUs. Here the responder sends 1024-byte READ responses and
/// the requester places them at 4096-byte strides: the READ completes with
/// SUCCESS and bytes 1024.. of the buffer are wrong (silent corruption; an
/// earlier version failed it with LOC_LEN_ERR instead).
#[test]
fn cm_connect_from_a_larger_mtu_port_agrees_on_the_path_mtu() {
    let text = r#"
name = "cm-mtu-mismatch"
[fabric]
[[fabric.nodes]]
name = "big"
ip = "10.0.0.1"
mtu = 4096
[[fabric.nodes]]
name = "small"
ip = "10.0.0.2"
mtu = 1024
[[streams]]
name = "read"
op = "read"
from = "big"
to = "small"
count = 1
size = 2048
"#;
    let scenario = Scenario::from_toml(text, "cm-mtu-mismatch").unwrap();
    let report = runner::run(&scenario, 1, false).unwrap().report;
    assert!(report.passed, "{}", report.to_text());
}

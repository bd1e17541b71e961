//! Simulator bugs the testbench found, kept as regression tests: each is the
//! smallest scenario that showed the bug.

use rctb_scenario::runner;
use rctb_scenario::scenario::Scenario;

/// RDMA CM between ports of different MTUs: the active side used to keep its
/// own port MTU while the passive side took the smaller one (the REP carried
/// no MTU). The responder then sent 1024-byte READ responses that the
/// requester placed at 4096-byte strides: the READ completed with SUCCESS and
/// bytes 1024.. were wrong. Fixed by 572ad62 (the REP carries the path MTU).
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

//! Writes the simulator's pcap of the conformance suite (two nodes with
//! rxe's MTU, 1024), to compare with rxe's:
//! `cargo run -p rctb --example conformance_pcap -- OUT.pcap`
fn main() {
    let out = std::env::args().nth(1).expect("usage: conformance_pcap OUT.pcap");
    let sim = rctb_sim::Sim::new(1);
    let mtu = rctb_core::transport::Mtu::Mtu1024;
    let node = |name: &str, ip: &str| {
        sim.add_node({
            let mut node_config = rctb_sim::NodeConfig::new(name, ip.parse().expect("ip"));
            node_config.mtu = mtu;
            node_config
        })
        .expect("node")
    };
    let (a, b) = (node("rxe1", "10.10.0.2"), node("rxe0", "10.10.0.1"));
    sim.enable_pcap();
    let results = rctb_conformance::run(&mut sim.transport(a), &mut sim.transport(b), "", &mut |_| {});
    assert!(results.iter().all(|r| r.passed()));
    std::fs::write(&out, sim.take_pcap().expect("pcap")).expect("write");
}

//! Validation of the receive server's configuration, field by field: both
//! edges of each valid range, and the first value outside it, with errors that
//! name the field and the range.

use rctb_roce_rx::{GidIndex, MAX_RX_QUEUE_DEPTH, ServerConfig, TransportConfig};
use rctb_transport::{Mtu, RnrTimer};

fn base() -> rctb_roce_rx::ServerConfigBuilder {
    ServerConfig::builder("192.168.1.10".parse().unwrap(), "rxe0")
}

#[test]
fn server_defaults_are_rogues() {
    let c = base().build().unwrap();
    assert_eq!((c.ib_port(), c.gid_index(), c.max_payload(), c.rx_queue_depth()), (1, GidIndex::Auto, 4096, 256));
    assert_eq!(c.slab_len(), 256 * 4096);
    assert_eq!(c.device(), "rxe0");
}

#[test]
fn device_must_be_named() {
    let e = ServerConfig::builder("1.2.3.4".parse().unwrap(), "").build().unwrap_err();
    assert_eq!(e.field, "device");
}

#[test]
fn ib_port_edges() {
    assert_eq!(base().ib_port(0).build().unwrap_err().field, "ib_port");
    assert_eq!(base().ib_port(1).build().unwrap().ib_port(), 1);
    assert_eq!(base().ib_port(255).build().unwrap().ib_port(), 255);
}

#[test]
fn gid_index_is_not_truncated() {
    assert_eq!(base().gid_index(GidIndex::Index(300)).build().unwrap().gid_index(), GidIndex::Index(300));
    assert_eq!(base().gid_index(GidIndex::Index(0)).build().unwrap().gid_index(), GidIndex::Index(0));
}

#[test]
fn max_payload_edges() {
    let e = base().max_payload(0).build().unwrap_err();
    assert_eq!(e.field, "max_payload");
    assert!(e.to_string().contains("> 0"), "{e}");
    assert_eq!(base().max_payload(1).build().unwrap().max_payload(), 1);
    // Largest payload with depth 1: slab just below 2^32.
    let c = base().rx_queue_depth(1).max_payload(u32::MAX).build().unwrap();
    assert_eq!(c.slab_len(), u32::MAX as u64);
}

#[test]
fn rx_queue_depth_edges() {
    let e = base().rx_queue_depth(0).build().unwrap_err();
    assert_eq!(e.field, "rx_queue_depth");
    assert!(e.to_string().contains("1..=32768"), "{e}");
    assert_eq!(base().rx_queue_depth(1).build().unwrap().rx_queue_depth(), 1);
    assert_eq!(base().rx_queue_depth(MAX_RX_QUEUE_DEPTH).build().unwrap().rx_queue_depth(), MAX_RX_QUEUE_DEPTH);
    assert_eq!(base().rx_queue_depth(MAX_RX_QUEUE_DEPTH + 1).build().unwrap_err().field, "rx_queue_depth");
}

#[test]
fn slab_must_stay_below_4_gib() {
    // 2^16 * 2^16 = 2^32: one byte too many.
    let e = base().rx_queue_depth(1 << 15).max_payload(1 << 17).build().unwrap_err();
    assert_eq!(e.field, "rx_queue_depth * max_payload");
    assert!(e.to_string().contains("2^32"), "{e}");
    let ok = base().rx_queue_depth(1 << 15).max_payload((1 << 17) - 1).build().unwrap();
    assert!(ok.slab_len() < 1 << 32);
}

#[test]
fn transport_defaults() {
    let t = TransportConfig::default();
    assert_eq!((t.pmtu(), t.min_rnr_timer().code(), t.rnr_retry(), t.retry_count()), (Mtu::Mtu4096, 12, 7, 3));
}

#[test]
fn pmtu_edges() {
    assert!(TransportConfig::from_codes(0, 12, 7, 3).unwrap_err().to_string().contains("1..=5"));
    assert_eq!(TransportConfig::from_codes(1, 12, 7, 3).unwrap().pmtu(), Mtu::Mtu256);
    assert_eq!(TransportConfig::from_codes(5, 12, 7, 3).unwrap().pmtu(), Mtu::Mtu4096);
    assert_eq!(TransportConfig::from_codes(6, 12, 7, 3).unwrap_err().field, "pmtu");
}

#[test]
fn min_rnr_timer_edges() {
    assert_eq!(TransportConfig::from_codes(5, 0, 7, 3).unwrap().min_rnr_timer().code(), 0);
    assert_eq!(TransportConfig::from_codes(5, 31, 7, 3).unwrap().min_rnr_timer().code(), 31);
    let e = TransportConfig::from_codes(5, 32, 7, 3).unwrap_err();
    assert_eq!(e.field, "min_rnr_timer");
    assert!(e.to_string().contains("0..=31"), "{e}");
}

#[test]
fn retry_edges() {
    let t = RnrTimer::default();
    for v in [0, 7] {
        assert_eq!(TransportConfig::new(Mtu::Mtu1024, t, v, 3).unwrap().rnr_retry(), v);
        assert_eq!(TransportConfig::new(Mtu::Mtu1024, t, 7, v).unwrap().retry_count(), v);
    }
    let e = TransportConfig::new(Mtu::Mtu1024, t, 8, 3).unwrap_err();
    assert_eq!(e.field, "rnr_retry");
    assert!(e.to_string().contains("0..=7"), "{e}");
    let e = TransportConfig::new(Mtu::Mtu1024, t, 7, 8).unwrap_err();
    assert_eq!(e.field, "retry_count");
    assert!(e.to_string().contains("0..=7"), "{e}");
}

//! What every machine can check: without RDMA devices (this project's build
//! machines) every entry point says `NoDevice` with a hint; with devices,
//! an unknown name is `NoDevice` too. Never a panic.

use rctb_core::transport::{TransportError, Verb};
use rctb_hw::{NO_DEVICE_HINT, UNKNOWN_DEVICE_HINT, VerbsTransport};

#[test]
fn no_device_is_a_clean_error_with_a_hint() {
    match rctb_hw::list_devices() {
        Err(e) => {
            assert_eq!(e, TransportError::NoDevice { verb: Verb::QueryDevice, hint: Some(NO_DEVICE_HINT) });
            for name in ["rxe0", "mlx5_0", ""] {
                let e = VerbsTransport::open(name).unwrap_err();
                assert_eq!(e, TransportError::NoDevice { verb: Verb::QueryDevice, hint: Some(NO_DEVICE_HINT) });
            }
            let msg = VerbsTransport::open("rxe0").unwrap_err().to_string();
            assert!(msg.contains("rdma link add rxe0 type rxe netdev eth0"), "{msg}");
            assert!(msg.contains("ci/hw-validate"), "{msg}");
        }
        Ok(devices) => {
            assert!(!devices.is_empty(), "list_devices returns NoDevice rather than an empty list");
            for d in &devices {
                assert!(!d.name.is_empty());
                assert!(!d.ports.is_empty(), "{}: no ports", d.name);
            }
            let e = VerbsTransport::open("no-such-rdma-device").unwrap_err();
            assert_eq!(e, TransportError::NoDevice { verb: Verb::QueryDevice, hint: Some(UNKNOWN_DEVICE_HINT) });
        }
    }
}

#[test]
fn the_transport_is_send() {
    fn send<T: Send>() {}
    send::<VerbsTransport>();
}

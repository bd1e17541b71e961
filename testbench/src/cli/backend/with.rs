//! The verbs backend's types in a build with it: rctb-hw's.

use rctb_core::transport::TransportError;

use super::DeviceFacts;

pub use rctb_hw::VerbsTransport as Device;

/// What [`super::Verbs`] holds in this build: the backend is there.
#[derive(Clone, Copy, Debug)]
pub struct Built;

pub fn built() -> Result<Built, super::NoVerbs> {
    Ok(Built)
}

pub fn open(_: Built, name: &str) -> Result<Device, TransportError> {
    Device::open(name)
}

pub fn list_devices(_: Built) -> Result<Vec<DeviceFacts>, TransportError> {
    let all = rctb_hw::list_devices()?;
    Ok(all.into_iter().map(|d| DeviceFacts { name: d.name, device: d.device, ports: d.ports }).collect())
}

pub fn no_device_hint(_: Built) -> &'static str {
    rctb_hw::NO_DEVICE_HINT
}

//! Opening the verbs backend the way the seed selects a device: by the
//! initiator's IP address (`source`), or the first RDMA device.

#[cfg(feature = "verbs")]
pub fn open_device(source: Option<&str>) -> pyo3::PyResult<rctb_hw::VerbsTransport> {
    use pyo3::exceptions::PyOSError;
    let devices = rctb_hw::VerbsTransport::list_devices()
        .map_err(|e| PyOSError::new_err(format!("listing RDMA devices: {e}")))?;
    let name = match source {
        Some(src) => {
            let ip: std::net::Ipv4Addr =
                src.parse().map_err(|_| crate::errors::invalid(format!("source {src:?}: not an IPv4 address")))?;
            devices.iter().find(|d| d.ipv4() == Some(ip)).map(|d| d.name.clone()).ok_or_else(|| {
                PyOSError::new_err(format!("source {src}: no RDMA device has a RoCE v2 GID with this address"))
            })?
        }
        None => devices
            .first()
            .map(|d| d.name.clone())
            .ok_or_else(|| PyOSError::new_err(format!("no RDMA device: {}", rctb_hw::NO_DEVICE_HINT)))?,
    };
    rctb_hw::VerbsTransport::open(&name).map_err(|e| PyOSError::new_err(format!("opening {name}: {e}")))
}

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

/// What a zero-copy view is made of: a region's bytes, from the verbs backend.
#[cfg(feature = "verbs")]
pub type Export = rctb_hw::MrExport;
/// Without the verbs backend there is nothing to view without a copy.
#[cfg(not(feature = "verbs"))]
pub enum Export {}

/// A buffer-protocol object over `export` (`rctb_hw::pybuffer::MrView`), or,
/// for a backend without one, `NotImplementedError`.
pub fn view_or_refuse(
    py: pyo3::Python<'_>,
    export: Option<Export>,
    readonly: bool,
) -> pyo3::PyResult<pyo3::Py<pyo3::PyAny>> {
    match export {
        #[cfg(feature = "verbs")]
        Some(x) => Ok(pyo3::Py::new(py, rctb_hw::pybuffer::MrView::new(x, readonly))?.into_any()),
        #[cfg(not(feature = "verbs"))]
        Some(x) => match x {},
        None => {
            let _ = (py, readonly);
            Err(pyo3::exceptions::PyNotImplementedError::new_err(
                "a view without a copy needs the verbs backend: the simulator's and udp's memory belongs to \
                 their engine thread, so there read() and getData() copy",
            ))
        }
    }
}

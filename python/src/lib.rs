//! The `rctb._rctb` extension module: rctb's Rust (initiator, RoCEv2
//! receive server, simulator, udp and verbs backends, scenario runner)
//! for the pure-Python package `rctb`, which presents it with the seeds'
//! APIs (`rctb.nvmeof`, `rctb.rocev2`).
//!
//! Contract: every blocking call releases the GIL; bad arguments raise
//! `ValueError` naming the field and the rule; nothing panics into Python
//! (a panic on an engine thread comes back as `RuntimeError`); every
//! backend object is freed when its Python object is closed or collected.

mod engine;
mod errors;
mod nvme;
mod proto;
mod queue;
mod rocev2;
mod scenario;
mod sim;
mod udp;
mod verbs;

use pyo3::prelude::*;

#[pymodule]
fn _rctb(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HAS_VERBS", cfg!(feature = "verbs"))?;
    m.add_class::<sim::Fabric>()?;
    m.add_class::<sim::NvmeTargetModel>()?;
    m.add_class::<sim::Gate>()?;
    m.add_class::<udp::UdpNetwork>()?;
    m.add_class::<nvme::NvmeController>()?;
    m.add_class::<queue::NvmeQueue>()?;
    m.add_class::<rocev2::RoceServerHandle>()?;
    m.add_class::<rocev2::FpgaEngineHandle>()?;
    #[cfg(feature = "verbs")]
    m.add_class::<rctb_hw::pybuffer::MrView>()?;
    m.add("QueueFullError", m.py().get_type::<errors::QueueFullError>())?;
    m.add("StatusFailure", m.py().get_type::<errors::StatusFailure>())?;
    m.add_function(wrap_pyfunction!(scenario::run_scenario_json, m)?)?;
    m.add_function(wrap_pyfunction!(scenario::sweep_json, m)?)?;
    proto::register(m)?;
    m.add_function(wrap_pyfunction!(rocev2::detect_gid_index, m)?)?;
    Ok(())
}

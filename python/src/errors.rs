//! Rust errors as Python exceptions: bad arguments are `ValueError`
//! naming the field and the rule; NVMe statuses, full queues and timeouts
//! are the exceptions the `nvmeof` package's users catch; transport
//! failures are `OSError`s; an rctb bug is `RuntimeError`, never a panic.

use pyo3::exceptions::{
    PyConnectionError, PyConnectionRefusedError, PyNotImplementedError, PyOSError, PyRuntimeError, PyTimeoutError,
    PyValueError,
};
use pyo3::prelude::*;
use rctb_core::nvmeof::NvmeError;

use crate::engine::EngineError;

pyo3::create_exception!(
    _rctb,
    QueueFullError,
    pyo3::exceptions::PyRuntimeError,
    "Raised when every command ID on an NVMe/RDMA queue is in use."
);
pyo3::create_exception!(
    _rctb,
    StatusFailure,
    pyo3::exceptions::PyException,
    "An NVMe status (converted to nvmeof.NVMeStatusError by the Python layer)."
);

pub fn invalid(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

pub fn engine_err(e: EngineError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

/// The exception of an initiator error.
pub fn nvme_err(e: NvmeError) -> PyErr {
    let text = e.to_string();
    match e {
        NvmeError::Invalid(_) | NvmeError::Build(_) => PyValueError::new_err(text),
        NvmeError::QueueFull { .. } => QueueFullError::new_err(text),
        // (result, status_field, message): the Python layer builds a
        // Completion and raises NVMeStatusError(completion).
        NvmeError::Status { error, .. } | NvmeError::ConnectInvalid { error, .. } => {
            StatusFailure::new_err((error.result, error.status.to_field(false), text))
        }
        NvmeError::Timeout { .. } | NvmeError::NotReady { .. } => PyTimeoutError::new_err(text),
        NvmeError::AuthRequired => PyNotImplementedError::new_err(text),
        NvmeError::Rejected { .. } => PyConnectionRefusedError::new_err(text),
        NvmeError::Unreachable { .. } | NvmeError::Disconnected { .. } | NvmeError::Completion { .. } => {
            PyConnectionError::new_err(text)
        }
        NvmeError::Transport(_) => PyOSError::new_err(text),
        NvmeError::Protocol(_)
        | NvmeError::UnknownCid { .. }
        | NvmeError::ControllerFatal
        | NvmeError::Unsupported(_) => PyRuntimeError::new_err(text),
        // An error a later initiator adds: RuntimeError until it gets its own.
        _ => PyRuntimeError::new_err(text),
    }
}

/// The verbs backend was asked for in a build without it.
#[cfg(not(feature = "verbs"))]
pub fn no_verbs() -> PyErr {
    PyRuntimeError::new_err(
        "this rctb build lacks the verbs backend (build the wheel with the cargo feature `verbs`: \
         MATURIN_PEP517_ARGS='--features verbs' pip install ./python, which needs libibverbs-dev, \
         librdmacm-dev and libclang-dev); use backend=rctb.sim.Fabric(...) or the udp backend instead",
    )
}

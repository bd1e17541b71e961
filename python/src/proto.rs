//! The wire builders and decoders behind `rctb.nvmeof.protocol`: rctb's
//! own encoders (`rctb_core::nvmeof::protocol`) with plain arguments. The
//! seed's argument rules and messages are checked in Python first; what
//! reaches here is in range, and anything else is a `ValueError`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rctb_core::nvmeof::protocol::{CmAccept, CmRequest, Command, Completion, ConnectData, Nqn, PSDT_SGL, Sgl};

fn perr(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A 64-byte command: `opcode`, PSDT SGL, command id 0, `nsid` (the
/// fctype byte for Fabrics), the keyed SGL `(addr, length, key)` or the
/// null descriptor, and command dwords 10..15.
#[pyfunction]
#[pyo3(signature = (opcode, nsid, sgl, cdw))]
pub fn encode_command<'py>(
    py: Python<'py>,
    opcode: u8,
    nsid: u32,
    sgl: Option<(u64, u64, u32)>,
    cdw: [u32; 6],
) -> PyResult<Bound<'py, PyBytes>> {
    let sgl = match sgl {
        None => Sgl::None,
        Some((addr, len, key)) => Sgl::keyed(addr, len, key).map_err(perr)?,
    };
    let c = Command { opcode, flags: PSDT_SGL, nsid, sgl, cdw, ..Command::default() };
    Ok(PyBytes::new(py, &c.encode()))
}

/// The 32-byte NVMe/RDMA CM request.
#[pyfunction]
pub fn cm_request<'py>(py: Python<'py>, qid: u16, depth: u16, cntlid: u16) -> PyResult<Bound<'py, PyBytes>> {
    let r = CmRequest::new(qid, depth, cntlid).map_err(perr)?;
    Ok(PyBytes::new(py, &r.encode()))
}

/// (recfmt, crqsize) of CM accept private data (at least 4 bytes).
#[pyfunction]
pub fn cm_accept(data: &[u8]) -> PyResult<(u16, u16)> {
    if data.len() < 4 {
        return Err(PyValueError::new_err("NVMe/RDMA CM response is shorter than 4 bytes"));
    }
    let a = CmAccept::decode(data).map_err(perr)?;
    Ok((a.recfmt, a.crqsize))
}

/// The 1024-byte Fabrics Connect data.
#[pyfunction]
pub fn connect_data<'py>(
    py: Python<'py>,
    host_id: [u8; 16],
    subnqn: String,
    hostnqn: String,
    cntlid: u16,
) -> PyResult<Bound<'py, PyBytes>> {
    let d = ConnectData {
        host_id,
        cntlid,
        subnqn: Nqn::new(subnqn).map_err(|e| perr(format!("subsystem NQN: {e}")))?,
        hostnqn: Nqn::new(hostnqn).map_err(|e| perr(format!("host NQN: {e}")))?,
    };
    Ok(PyBytes::new(py, &d.encode()))
}

/// (result, sq_head, sq_id, command_id, status_field) of the first 16 bytes.
#[pyfunction]
pub fn decode_completion(data: &[u8]) -> PyResult<(u64, u16, u16, u16, u16)> {
    let c =
        Completion::decode(data).map_err(|_| PyValueError::new_err("an NVMe completion must be at least 16 bytes"))?;
    Ok((c.result, c.sq_head, c.sq_id, c.cid, c.status_field))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(encode_command, m)?)?;
    m.add_function(wrap_pyfunction!(cm_request, m)?)?;
    m.add_function(wrap_pyfunction!(cm_accept, m)?)?;
    m.add_function(wrap_pyfunction!(connect_data, m)?)?;
    m.add_function(wrap_pyfunction!(decode_completion, m)?)?;
    Ok(())
}

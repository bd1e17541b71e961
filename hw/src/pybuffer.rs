//! The CPython buffer protocol over registered memory, for the rctb Python
//! package: `MrView` hands Python the bytes of an [`MrExport`] without a
//! copy, so `memoryview(view)` and `numpy.frombuffer(view, ...)` read (and,
//! unless read-only, write) the memory the NIC fills.
//!
//! It lives here because filling a `Py_buffer` takes raw pointers, and this
//! is the one crate of the workspace that may use `unsafe`.
//!
//! Contract: the memory stays allocated while any buffer view of it lives
//! (the export holds it). `MrView::exports` counts the live views, so an
//! owner can refuse to recycle the bytes (a receive slot re-posted, a buffer
//! closed) while Python still looks at them, as `bytearray` refuses to
//! resize with exports (BufferError).

use std::ffi::c_int;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::MrExport;

/// Bytes of a registered region as a Python buffer, without a copy.
#[pyclass(module = "rctb._rctb", frozen)]
#[derive(Debug)]
pub struct MrView {
    export: MrExport,
    readonly: bool,
    exports: AtomicUsize,
}

impl MrView {
    /// A view of `export`; `readonly` refuses writable buffer requests.
    pub fn new(export: MrExport, readonly: bool) -> Self {
        MrView { export, readonly, exports: AtomicUsize::new(0) }
    }

    /// Buffer views of it alive now (`memoryview`s, numpy arrays).
    pub fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }
}

#[pymethods]
impl MrView {
    /// The number of bytes.
    fn __len__(&self) -> usize {
        self.export.len()
    }

    /// Buffer views of it alive now.
    #[getter(exports)]
    fn py_exports(&self) -> usize {
        self.exports()
    }

    /// Whether writable buffer views are refused.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    /// A copy of the bytes now.
    fn tobytes(&self) -> Vec<u8> {
        self.export.to_vec()
    }

    /// Fills `view` with the export's bytes (one-dimensional, unsigned
    /// bytes, C-contiguous).
    ///
    /// # Safety
    /// Called by CPython with a `Py_buffer` to fill, as the buffer protocol
    /// specifies.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no Py_buffer to fill"));
        }
        let (ptr, len, readonly) = {
            let me = slf.get();
            (me.export.as_ptr(), me.export.len(), me.readonly)
        };
        let len = ffi::Py_ssize_t::try_from(len).map_err(|_| PyBufferError::new_err("view too large"))?;
        // SAFETY: `view` is the non-null Py_buffer CPython asked us to fill;
        // `ptr..ptr+len` is memory the export keeps allocated, and
        // PyBuffer_FillInfo takes a new reference to `slf` (stored in
        // `view.obj`), so the view outlives neither the object nor, through
        // it, the memory. It sets an exception and returns -1 when a
        // writable view is asked of a read-only one.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.cast(), len, c_int::from(readonly), flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        slf.get().exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Counts the view as gone (the memory needs no release).
    ///
    /// # Safety
    /// Called by CPython once for each view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

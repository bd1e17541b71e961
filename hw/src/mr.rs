//! Memory regions over buffers the transport owns.
//!
//! `reg_mr` allocates a zeroed, page-aligned buffer and registers it; the
//! application reaches it only through bounds-checked copies and views. The
//! buffer is freed only after `ibv_dereg_mr` succeeded: if deregistration
//! fails, the NIC may still DMA into it, so it is leaked on purpose.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use rctb_core::transport::{Access, MrId, MrInfo, MrVisitor, Result, TransportError, Verb};
use rdma_sys::{ibv_dereg_mr, ibv_mr, ibv_reg_mr, ibv_sge};

use crate::pd::Pd;
use crate::sys::{last_os_error, os_error, rc_errno};

/// Alignment (and size granule) of region buffers.
pub(crate) const PAGE: usize = 4096;

/// A zeroed, page-aligned heap buffer, at least one page long.
#[derive(Debug)]
pub(crate) struct PageBuffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl PageBuffer {
    pub(crate) fn zeroed(len: u64) -> Result<Self> {
        let too_big = || TransportError::invalid(Verb::RegMr, "len", len, "does not fit this machine's address space");
        let len = usize::try_from(len).map_err(|_| too_big())?;
        let size = len.max(1).checked_next_multiple_of(PAGE).ok_or_else(too_big)?;
        let layout = Layout::from_size_align(size, PAGE).map_err(|_| too_big())?;
        // SAFETY: `layout` has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(TransportError::Exhausted { verb: Verb::RegMr, what: "memory" })?;
        Ok(PageBuffer { ptr, layout })
    }

    pub(crate) fn addr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

// SAFETY: the buffer is plain heap memory owned by this value; no Rust
// reference into it is ever kept (every access is a raw copy or a view
// scoped to one call), so moving or sharing the owner across threads is
// sound. The NIC and a Python buffer view may touch the bytes at any time,
// which is why they are only ever read or written through raw pointers.
unsafe impl Send for PageBuffer {}
// SAFETY: as above.
unsafe impl Sync for PageBuffer {}

impl Drop for PageBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this very layout.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// A registered region: the `ibv_mr`, its buffer and its PD. The buffer is
/// shared with the [`MrExport`]s handed out, so it outlives the
/// registration while one is alive.
#[derive(Debug)]
pub(crate) struct MemoryRegion {
    mr: Option<NonNull<ibv_mr>>,
    buf: ManuallyDrop<Arc<PageBuffer>>,
    pub(crate) info: MrInfo,
    pub(crate) pd: Arc<Pd>,
}

impl MemoryRegion {
    pub(crate) fn register(pd: &Arc<Pd>, id: MrId, len: u64, access: Access) -> Result<Self> {
        let buf = PageBuffer::zeroed(len)?;
        // `len` fits usize: PageBuffer checked it.
        let length = len as usize;
        // SAFETY: `buf` is a live allocation of at least `length` bytes that
        // stays allocated until the MR is deregistered (see `Drop`); the PD
        // is alive while `pd` is.
        let mr = unsafe { ibv_reg_mr(pd.as_ptr(), buf.addr().cast(), length, access.bits() as i32) };
        let mr = NonNull::new(mr).ok_or_else(|| last_os_error(Verb::RegMr, "ibv_reg_mr"))?;
        // SAFETY: `mr` was just returned by ibv_reg_mr and is live.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        let info = MrInfo { id, addr: buf.addr() as u64, len, lkey, rkey, access };
        Ok(MemoryRegion { mr: Some(mr), buf: ManuallyDrop::new(Arc::new(buf)), info, pd: Arc::clone(pd) })
    }

    /// `len` bytes at `offset` as a handle that keeps the buffer allocated
    /// (bounds-checked).
    pub(crate) fn export(&self, offset: u64, len: u64) -> Result<MrExport> {
        self.span(offset, len)?;
        // Both fit usize: `offset + len <= info.len`, which fits (span).
        Ok(MrExport { buf: Arc::clone(&self.buf), offset: offset as usize, len: len as usize, mr: self.info.id })
    }

    /// `offset..offset+len` as a pointer into the buffer, bounds-checked.
    fn span(&self, offset: u64, len: u64) -> Result<*mut u8> {
        match offset.checked_add(len) {
            // `end <= info.len <= buffer size`, so `offset` fits usize.
            Some(end) if end <= self.info.len => {
                // SAFETY: `offset <= len of the allocation` (checked above),
                // so the result stays inside (or one past) the buffer.
                Ok(unsafe { self.buf.addr().add(offset as usize) })
            }
            _ => Err(TransportError::invalid(
                Verb::MrAccess,
                "offset+len",
                offset.saturating_add(len),
                "exceeds the region",
            )),
        }
    }

    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let dst = self.span(offset, data.len() as u64)?;
        // SAFETY: `dst..dst+data.len()` is inside our buffer (span checked);
        // `data` is a separate Rust slice, so they do not overlap. Raw copies
        // (no `&mut [u8]` over the buffer) because the NIC may access the
        // memory concurrently, which no Rust reference may assume away.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    pub(crate) fn read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let src = self.span(offset, out.len() as u64)?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    pub(crate) fn view(&self, offset: u64, len: u64, f: &mut dyn MrVisitor) -> Result<()> {
        let src = self.span(offset, len)?;
        // SAFETY: the range is inside our live buffer (span checked) and
        // `len` fits usize because it is at most the buffer size. The slice
        // lives only for the visitor call, during which the transport is
        // borrowed, so the buffer cannot be freed. Bytes the NIC writes
        // meanwhile (a remote WRITE still in flight) are plain u8, valid in
        // any pattern: like verbs, the application must not rely on bytes
        // that outstanding work may still change.
        let bytes = unsafe { std::slice::from_raw_parts(src, len as usize) };
        f.visit(bytes);
        Ok(())
    }

    /// A scatter/gather entry for `len` bytes at `offset`.
    pub(crate) fn sge(&self, offset: u64, len: u32, verb: Verb) -> Result<ibv_sge> {
        let addr = self.span(offset, len.into()).map_err(|e| match e {
            TransportError::InvalidArgument { source, .. } => TransportError::InvalidArgument { verb, source },
            other => other,
        })?;
        Ok(ibv_sge { addr: addr as u64, length: len, lkey: self.info.lkey })
    }

    /// Deregisters now; dropping the region then frees the buffer. On
    /// failure the region stays as it was (registered, buffer owned).
    pub(crate) fn dereg(&mut self) -> Result<()> {
        let Some(mr) = self.mr else { return Ok(()) };
        // SAFETY: `mr` is our live registration; nothing else holds it.
        let rc = unsafe { ibv_dereg_mr(mr.as_ptr()) };
        if rc != 0 {
            return Err(os_error(Verb::DeregMr, "ibv_dereg_mr", rc_errno(rc)));
        }
        self.mr = None;
        Ok(())
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if let Some(mr) = self.mr.take() {
            // SAFETY: our live registration, released exactly once.
            let rc = unsafe { ibv_dereg_mr(mr.as_ptr()) };
            if rc != 0 {
                // The NIC may still write into the buffer: leak it.
                tracing::error!(
                    errno = rc_errno(rc),
                    region = %self.info.id,
                    "ibv_dereg_mr failed; leaking the region's buffer"
                );
                return;
            }
        }
        // SAFETY: deregistered (now or in `dereg`), so the NIC no longer
        // reaches the buffer; our reference to it is dropped exactly once,
        // here (an `MrExport` may keep the memory a while longer).
        unsafe { ManuallyDrop::drop(&mut self.buf) }
    }
}

/// Bytes of a registered region, shared with their owner without a copy
/// ([`VerbsTransport::mr_export`](crate::VerbsTransport::mr_export)): the
/// memory stays allocated while the handle lives, also after `dereg_mr`
/// (the NIC then no longer writes it). What the NIC or the application
/// writes is seen through the handle at once; like verbs, nothing orders
/// those writes with a reader.
#[derive(Clone, Debug)]
pub struct MrExport {
    buf: Arc<PageBuffer>,
    offset: usize,
    len: usize,
    mr: MrId,
}

impl MrExport {
    /// The first byte. Valid for [`len`](Self::len) bytes while `self`
    /// lives; read and write it only through raw pointers (the NIC may
    /// change it at any time).
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: `offset + len` is within the allocation (checked when the
        // export was made), so the result stays inside (or one past) it.
        unsafe { self.buf.addr().add(self.offset) }
    }

    /// How many bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it spans no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region it was taken from.
    pub fn mr(&self) -> MrId {
        self.mr
    }

    /// A copy of the bytes now.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: `as_ptr()..+len` is inside the live allocation (held by
        // `self.buf`); `out` is a separate allocation of `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr(), out.as_mut_ptr(), self.len) };
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_zeroed_and_at_least_a_page() {
        for len in [0, 1, 4095, 4096, 4097, 1 << 20] {
            let b = PageBuffer::zeroed(len).unwrap();
            assert_eq!(b.addr() as usize % PAGE, 0);
            assert!(b.layout.size() >= len as usize && b.layout.size() >= PAGE);
            // SAFETY: the buffer is at least `len` bytes and initialised (zeroed).
            let s = unsafe { std::slice::from_raw_parts(b.addr(), len as usize) };
            assert!(s.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn an_export_keeps_the_memory_and_sees_writes() {
        let buf = Arc::new(PageBuffer::zeroed(64).unwrap());
        let x = MrExport { buf: Arc::clone(&buf), offset: 8, len: 4, mr: MrId(1) };
        // SAFETY: offset 8..12 is inside the 4096-byte allocation.
        unsafe { std::ptr::copy_nonoverlapping([1u8, 2, 3, 4].as_ptr(), buf.addr().add(8), 4) };
        drop(buf);
        assert_eq!(x.to_vec(), [1, 2, 3, 4]);
        assert_eq!((x.len(), x.mr()), (4, MrId(1)));
    }

    #[test]
    fn absurd_lengths_are_errors_not_aborts() {
        let e = PageBuffer::zeroed(u64::MAX).unwrap_err();
        assert!(matches!(e, TransportError::InvalidArgument { verb: Verb::RegMr, .. }), "{e:?}");
    }
}

//! Protection domains and memory regions: a program's buffer as the
//! engine's region bytes.

use super::*;

// ---- protection domains and memory regions ----

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_alloc_pd(context: *mut sys::ibv_context) -> *mut sys::ibv_pd {
        if context.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: a live context.
        let ctx = unsafe { Context::from_ibv(context) };
        let r = ctx.rt.progress.lock().driver.engine_mut(0).0.alloc_pd();
        match r {
            Ok(id) => {
                let pd = Box::new(Pd { pd: sys::ibv_pd { context, handle: id.0 }, id });
                Box::into_raw(pd) as *mut sys::ibv_pd
            }
            Err(e) => fail(errno_of(&e)),
        }
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_dealloc_pd(pd: *mut sys::ibv_pd) -> c_int {
        if pd.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live PD from ibv_alloc_pd.
        let (p, ctx) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context)) };
        let r = ctx.rt.progress.lock().driver.engine_mut(0).0.dealloc_pd(p.id);
        match r {
            Ok(()) => {
                // SAFETY: freed once, after the engine let it go.
                drop(unsafe { Box::from_raw(pd as *mut Pd) });
                0
            }
            Err(e) => errno_of(&e),
        }
    }
);

/// A program's buffer as the engine's region bytes: copies to and from
/// its address, as a NIC's DMA would (see the crate docs on Safety).
#[derive(Debug)]
struct UserMemory {
    base: *mut u8,
    len: u64,
}

// SAFETY: the memory is the program's, registered for the device to read
// and write from any thread until it is deregistered (verbs' rule); the
// engine touches it only under its lock.
unsafe impl Send for UserMemory {}

impl ExternalMemory for UserMemory {
    fn read_into(&self, offset: u64, len: usize, out: &mut Vec<u8>) {
        debug_assert!(offset + len as u64 <= self.len);
        out.reserve(len);
        let at = out.len();
        // SAFETY: the engine checked offset + len against the registered
        // length; the source is the program's registered buffer and the
        // destination the spare capacity just reserved. Raw copies, not
        // slices: the program may write the buffer meanwhile, as it may
        // under a NIC's DMA.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset as usize), out.as_mut_ptr().add(at), len);
            out.set_len(at + len);
        }
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        debug_assert!(offset + data.len() as u64 <= self.len);
        // SAFETY: as in read_into: a checked range of the registered buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.add(offset as usize), data.len()) };
    }
}

pub(crate) fn access_of(flags: c_uint) -> Option<Access> {
    let known = sys::IBV_ACCESS_LOCAL_WRITE
        | sys::IBV_ACCESS_REMOTE_WRITE
        | sys::IBV_ACCESS_REMOTE_READ
        | sys::IBV_ACCESS_REMOTE_ATOMIC
        | sys::IBV_ACCESS_RELAXED_ORDERING;
    if flags & !known != 0 {
        return None;
    }
    let mut a = Access::NONE;
    for (bit, acc) in [
        (sys::IBV_ACCESS_LOCAL_WRITE, Access::LOCAL_WRITE),
        (sys::IBV_ACCESS_REMOTE_WRITE, Access::REMOTE_WRITE),
        (sys::IBV_ACCESS_REMOTE_READ, Access::REMOTE_READ),
        (sys::IBV_ACCESS_REMOTE_ATOMIC, Access::REMOTE_ATOMIC),
    ] {
        if flags & bit != 0 {
            a = a | acc;
        }
    }
    Some(a)
}

fn reg_mr(pd: *mut sys::ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_uint) -> *mut sys::ibv_mr {
    if pd.is_null() || (addr.is_null() && length > 0) {
        return fail(libc::EINVAL);
    }
    // Optional flags a device may ignore (relaxed ordering and friends)
    // are ignored; unknown mandatory ones are refused, as rdma-core does.
    let Some(acc) = access_of(access & !sys::IB_UVERBS_ACCESS_OPTIONAL_RANGE) else { return fail(libc::EINVAL) };
    // SAFETY: a live PD.
    let (p, ctx) = unsafe { (obj::<Pd, _>(pd), Context::from_ibv((*pd).context)) };
    let mem = Box::new(UserMemory { base: addr as *mut u8, len: length as u64 });
    let mut st = ctx.rt.progress.lock();
    let r = st.driver.engine_mut(0).0.reg_mr_external(p.id, iova, length as u64, acc, mem);
    match r {
        Ok(info) => {
            let local_write = access & sys::IBV_ACCESS_LOCAL_WRITE != 0;
            st.owner.mrs.insert(info.lkey, MrLink { id: info.id, iova, local_write });
            let mr = sys::ibv_mr {
                context: ctx.ibv(),
                pd,
                addr,
                length,
                handle: info.id.0,
                lkey: info.lkey,
                rkey: info.rkey,
            };
            Box::into_raw(Box::new(Mr { mr, id: info.id })) as *mut sys::ibv_mr
        }
        Err(e) => fail(errno_of(&e)),
    }
}

export!(
    "IBVERBS_1.1",
    null_mut(),
    fn ibv_reg_mr(pd: *mut sys::ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, addr as u64, access as c_uint)
    }
);

export!(
    "IBVERBS_1.7",
    null_mut(),
    fn ibv_reg_mr_iova(
        pd: *mut sys::ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_int,
    ) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, iova, access as c_uint)
    }
);

export!(
    "IBVERBS_1.8",
    null_mut(),
    fn ibv_reg_mr_iova2(
        pd: *mut sys::ibv_pd,
        addr: *mut c_void,
        length: usize,
        iova: u64,
        access: c_uint,
    ) -> *mut sys::ibv_mr {
        reg_mr(pd, addr, length, iova, access)
    }
);

export!(
    "IBVERBS_1.1",
    libc::EIO,
    fn ibv_dereg_mr(mr: *mut sys::ibv_mr) -> c_int {
        if mr.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: a live MR from a registration.
        let (m, ctx) = unsafe { (obj::<Mr, _>(mr), Context::from_ibv((*mr).context)) };
        let mut st = ctx.rt.progress.lock();
        match st.driver.engine_mut(0).0.dereg_mr(m.id) {
            Ok(()) => {
                // SAFETY: the MR is live (above).
                let lkey = unsafe { (*mr).lkey };
                st.owner.mrs.remove(&lkey);
                drop(st);
                // SAFETY: freed once, after the engine let it go.
                drop(unsafe { Box::from_raw(mr as *mut Mr) });
                0
            }
            Err(e) => errno_of(&e),
        }
    }
);

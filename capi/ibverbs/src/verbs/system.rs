//! fork support and the sysfs helpers: what a program asks of the
//! library about the machine rather than a device.

use super::*;

// ---- fork support ----

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_fork_init() -> c_int {
        // Registered memory is the program's own pages, read by a thread of
        // this process: fork needs no page pinning care. The child cannot use
        // the parent's devices (their threads do not survive fork), as with
        // real verbs without fork support.
        0
    }
);

export!(
    "IBVERBS_1.13",
    0,
    fn ibv_is_fork_initialized() -> c_int {
        // IBV_FORK_UNNEEDED: nothing of this library depends on it.
        2
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
        0
    }
);

export!(
    "IBVERBS_1.1",
    0,
    fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
        0
    }
);

// ---- sysfs ----

export!(
    "IBVERBS_1.0",
    -1,
    fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int {
        // There is no sysfs device; the few files programs read are answered
        // from the library's own facts, the rest do not exist.
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            set_errno(libc::EINVAL);
            return -1;
        }
        // SAFETY: NUL-terminated strings of the caller.
        let (dir, file) = unsafe { (std::ffi::CStr::from_ptr(dir), std::ffi::CStr::from_ptr(file)) };
        let ours = device::devices().iter().any(|d| {
            // SAFETY: the library's own NUL-terminated path.
            dir == unsafe { std::ffi::CStr::from_ptr(d.dev.ibdev_path.as_ptr()) }
        });
        let value = match (ours, file.to_bytes()) {
            (true, b"board_id") => "RCTB-UDP\n",
            (true, b"hw_rev") => "0\n",
            (true, b"fw_ver") => concat!("rctb ", env!("CARGO_PKG_VERSION"), "\n"),
            (true, b"node_type") => "1: CA\n",
            _ => {
                set_errno(libc::ENOENT);
                return -1;
            }
        };
        let n = value.len().min(size - 1);
        // SAFETY: `buf` holds `size` bytes; n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(value.as_ptr() as *const c_char, buf, n);
            *buf.add(n) = 0;
        }
        n as c_int
    }
);

export!(
    "IBVERBS_1.0",
    std::ptr::null(),
    fn ibv_get_sysfs_path() -> *const c_char {
        c_str("/sys\0")
    }
);

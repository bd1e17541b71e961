//! Small helpers around the C calling conventions of libibverbs and
//! librdmacm: errno capture, `strerror`, socket addresses, non-blocking fds
//! and the monotonic clock. Owns no verbs objects.

use std::ffi::CStr;
use std::net::{Ipv4Addr, SocketAddrV4};

use rctb_core::transport::{TransportError, Verb};

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// The error code of a verbs call that returned `rc != 0`.
///
/// libibverbs is not consistent: most calls return the errno value itself
/// (positive), providers sometimes return it negated, and the older calls
/// (and every librdmacm call) return -1 and set `errno`.
pub(crate) fn rc_errno(rc: i32) -> i32 {
    match rc {
        -1 => errno(),
        rc if rc < 0 => -rc,
        rc => rc,
    }
}

/// `strerror(errno)`, thread-safe.
pub(crate) fn strerror(errno: i32) -> String {
    let mut buf = [0 as libc::c_char; 256];
    // SAFETY: `buf` is a writable buffer of the length passed; the XSI
    // `strerror_r` (what the libc crate binds) NUL-terminates on success.
    let rc = unsafe { libc::strerror_r(errno, buf.as_mut_ptr(), buf.len()) };
    if rc != 0 {
        return format!("unknown error {errno}");
    }
    // SAFETY: on success `buf` holds a NUL-terminated string (see above).
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

/// A `TransportError::Os` for `what` (the C function) failing with `errno`.
pub(crate) fn os_error(verb: Verb, what: &'static str, errno: i32) -> TransportError {
    TransportError::Os { verb, what, errno, message: strerror(errno) }
}

/// A `TransportError::Os` for the current `errno`.
pub(crate) fn last_os_error(verb: Verb, what: &'static str) -> TransportError {
    os_error(verb, what, errno())
}

/// Checks the return code of a verbs call (0 = success).
pub(crate) fn check_rc(rc: i32, verb: Verb, what: &'static str) -> Result<(), TransportError> {
    if rc == 0 { Ok(()) } else { Err(os_error(verb, what, rc_errno(rc))) }
}

/// A `sockaddr_in` for `addr` (network byte order inside).
pub(crate) fn sockaddr_in(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        // The octets are already in network order: keep their memory order.
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(addr.ip().octets()) },
        sin_zero: [0; 8],
    }
}

/// The IPv4 address of a `sockaddr` when it is `AF_INET`.
pub(crate) fn socket_addr_v4(sa: &libc::sockaddr) -> Option<SocketAddrV4> {
    if i32::from(sa.sa_family) != libc::AF_INET {
        return None;
    }
    let sin = sa as *const libc::sockaddr as *const libc::sockaddr_in;
    // SAFETY: `sa_family == AF_INET` says the storage behind `sa` is a
    // `sockaddr_in`; librdmacm keeps addresses in `sockaddr_storage`-sized
    // unions, so reading the (16-byte) `sockaddr_in` stays in bounds.
    let sin = unsafe { std::ptr::read_unaligned(sin) };
    Some(SocketAddrV4::new(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()), u16::from_be(sin.sin_port)))
}

/// Puts `fd` in non-blocking mode.
pub(crate) fn set_nonblocking(fd: i32, verb: Verb) -> Result<(), TransportError> {
    // SAFETY: fcntl on an fd we own; F_GETFL takes no further argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(last_os_error(verb, "fcntl(F_GETFL)"));
    }
    // SAFETY: as above; F_SETFL takes an int of flags.
    if unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(last_os_error(verb, "fcntl(F_SETFL, O_NONBLOCK)"));
    }
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds: one time base for every transport in
/// the process (and every process on the machine).
pub(crate) fn monotonic_nanos() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// A C string from a possibly-null pointer, lossily.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that stays valid for
/// the duration of the call.
pub(crate) unsafe fn cstr_lossy(p: *const libc::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated per this function's contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strerror_names_errors() {
        assert_eq!(strerror(libc::EBUSY), "Device or resource busy");
        assert!(strerror(99_999).contains("99999"), "{}", strerror(99_999));
    }

    #[test]
    fn rc_conventions() {
        assert_eq!(rc_errno(libc::EINVAL), libc::EINVAL);
        assert_eq!(rc_errno(-libc::ENOMEM), libc::ENOMEM);
    }

    #[test]
    fn sockaddr_round_trip() {
        let a = SocketAddrV4::new(Ipv4Addr::new(10, 10, 0, 2), 4420);
        let sin = sockaddr_in(a);
        assert_eq!(sin.sin_port, 4420u16.to_be());
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 10, 0, 2]);
        let sa = &sin as *const libc::sockaddr_in as *const libc::sockaddr;
        // SAFETY: `sin` is a live sockaddr_in; sockaddr is its common prefix.
        assert_eq!(socket_addr_v4(unsafe { &*sa }), Some(a));
    }

    #[test]
    fn clock_moves_forward() {
        let a = monotonic_nanos();
        let b = monotonic_nanos();
        assert!(a > 0 && b >= a);
    }
}

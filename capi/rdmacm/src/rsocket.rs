//! The rsocket family (`rsocket`, `rsend`, `rpoll`, `riomap`, ...) and
//! `repoll_*`: sockets over RDMA, which this library does not offer. Each
//! fails as a socket call does, -1 (or `(size_t)-1` for `riowrite`) with
//! errno ENOSYS, so that a program linked against the full library loads,
//! and one that tries rsockets learns at once that they are not there.
//!
//! The arguments are never read, so they are not declared: under the C
//! calling conventions of x86_64 and aarch64 Linux a function may ignore
//! what its caller passes. The return type is declared exactly (a
//! `ssize_t` is returned in all of rax, an `int` in eax only).

use std::ffi::c_int;

use crate::abi::set_errno;

/// Entries returning `int` -1 with errno ENOSYS.
macro_rules! int_enosys {
    ($ver:literal => $($name:ident),* $(,)?) => {
        $( export!($ver, -1, fn $name() -> c_int { set_errno(libc::ENOSYS); -1 }); )*
    };
}

/// Entries returning `ssize_t` (or `off_t`, `size_t`: 64 bits) -1 with errno ENOSYS.
macro_rules! wide_enosys {
    ($ver:literal => $($name:ident),* $(,)?) => {
        $( export!($ver, -1, fn $name() -> isize { set_errno(libc::ENOSYS); -1 }); )*
    };
}

int_enosys!("RDMACM_1.0" => rsocket, rbind, rlisten, raccept, rconnect, rshutdown, rclose, rpoll, rselect,
    rgetpeername, rgetsockname, rsetsockopt, rgetsockopt, rfcntl, riounmap);
// riomap returns off_t, riowrite size_t, the rest ssize_t.
wide_enosys!("RDMACM_1.0" => rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv, rwrite,
    rwritev, riomap, riowrite);
int_enosys!("RDMACM_1.5" => repoll_create, repoll_ctl, repoll_wait);

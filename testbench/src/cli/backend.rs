//! Which backends this build of rctb has, and the one message every front
//! end gives when a verbs path is asked of a build without it.
//!
//! `sim` and `udp` are always compiled in: they need only Rust. `verbs`
//! (rctb-hw over libibverbs/librdmacm) is the cargo feature `verbs`, whose
//! build needs rdma-core's headers and libclang.

/// Whether the verbs backend is compiled in (cargo feature `verbs`).
pub const VERBS: bool = cfg!(feature = "verbs");

/// What a verbs path says in a build without the verbs backend: what is
/// missing and how to get it.
pub const NO_VERBS: &str = "this rctb was built without the verbs backend: apt-get install libibverbs-dev \
    librdmacm-dev libclang-dev, then cargo build --release -p rctb --features verbs";

/// The line of [`SUMMARY`] as a literal, for `concat!` (`rctb --version`).
#[cfg(feature = "verbs")]
#[macro_export]
macro_rules! backends_line {
    () => {
        "backends: sim yes, udp yes, verbs yes"
    };
}
/// The line of [`SUMMARY`] as a literal, for `concat!` (`rctb --version`).
#[cfg(not(feature = "verbs"))]
#[macro_export]
macro_rules! backends_line {
    () => {
        "backends: sim yes, udp yes, verbs no (build with --features verbs)"
    };
}

/// One line naming each backend and whether this build has it, as
/// `rctb --version` and `rctb --help` print it.
pub const SUMMARY: &str = backends_line!();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_says_what_this_build_has() {
        assert!(SUMMARY.starts_with("backends: sim yes, udp yes, verbs "));
        assert_eq!(SUMMARY.contains("verbs yes"), VERBS);
        assert!(NO_VERBS.contains("--features verbs") && NO_VERBS.contains("libibverbs-dev"));
    }
}

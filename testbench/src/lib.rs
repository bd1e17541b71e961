//! `rctb`, the command line: the front ends of the `rctb` binary, one
//! module of [`cli`] per subcommand group, and `cli::backend`, the one
//! backend opener (`sim | udp | verbs`). A library target only so that the
//! binary and its tests share them; not an API. The scenario library they
//! drive is the crate `rctb-scenario`.

pub mod cli;

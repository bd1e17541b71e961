//! `rctb`: the testbench's command line. The argument tree and the
//! dispatch are `rctb::cli::command`, so that tests can parse the command
//! lines the docs show.
//!
//! Exit status: 0 when every expectation (case, transfer) held, 1 when one
//! failed, 2 when the input could not be used (unreadable, invalid, a
//! backend this build lacks) or output failed.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    rctb::cli::command::Cli::parse().run()
}

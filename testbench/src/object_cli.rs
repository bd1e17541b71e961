//! `rctb object serve`: the hipobj gateway (rctb_gateway) from the command
//! line. `get` / `put` are not written yet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use rctb_gateway::auth::Users;
use rctb_gateway::serve::{ServeOptions, serve_sim};

#[derive(Debug, clap::Args)]
pub struct ObjectArgs {
    #[command(subcommand)]
    command: ObjectCommand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ObjectBackend {
    /// The session server on a simulated fabric: every control-plane route
    /// over real HTTP, no RDMA hardware (the data phase needs a client on
    /// the same fabric, so only in-process tests run it).
    Sim,
}

#[derive(Debug, clap::Subcommand)]
enum ObjectCommand {
    /// Serve the control plane (POST /.hipobj-rc/{prepare,ready,cancel}, GET /rc-sessions)
    /// with objects under --root.
    Serve {
        /// Where objects live (created if missing).
        #[arg(long)]
        root: PathBuf,
        /// Address to listen on (port 0 picks one; the chosen address is printed).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[arg(long, value_enum, default_value = "sim")]
        backend: ObjectBackend,
        /// TOML users file: [[user]] access_key, secret_key, admin. Without it,
        /// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are the one, admin, user.
        #[arg(long)]
        users: Option<PathBuf>,
        /// SigV4 region.
        #[arg(long, default_value = "us-east-1")]
        region: String,
    },
}

pub fn main(args: &ObjectArgs) -> ExitCode {
    match &args.command {
        ObjectCommand::Serve { root, listen, backend: ObjectBackend::Sim, users, region } => {
            let users = match users {
                Some(p) => Users::load(p),
                None => Users::from_env(
                    std::env::var("AWS_ACCESS_KEY_ID").ok(),
                    std::env::var("AWS_SECRET_ACCESS_KEY").ok(),
                ),
            };
            let users = match users {
                Ok(u) => u,
                Err(e) => {
                    eprintln!("rctb object serve: {e}");
                    return ExitCode::from(2);
                }
            };
            // Version ids and session ids must differ across restarts: seed
            // them from the kernel's random source.
            let mut seed = [0u8; 32];
            if let Err(e) =
                std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
            {
                eprintln!("rctb object serve: /dev/urandom: {e}");
                return ExitCode::from(2);
            }
            let opts = ServeOptions { root: root.clone(), listen: *listen, users, region: region.clone(), seed };
            match serve_sim(opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("rctb object serve: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

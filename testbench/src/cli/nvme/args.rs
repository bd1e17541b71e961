//! `rctb nvme`'s command line: the backend, the options every subcommand
//! takes, and the subcommands with their own.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use rctb_core::transport::{DEFAULT_SPIN, PollModeName};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum NvmeBackend {
    /// A simulated target (two namespaces: 512-byte and 4096-byte blocks).
    Sim,
    /// An RDMA device of this machine (build with `--features verbs`).
    Verbs,
    /// A UDP endpoint of this machine (`--device ADDR[:PORT]`), no RDMA needed.
    Udp,
}

/// Options every subcommand takes.
#[derive(Debug, Args)]
pub struct Common {
    #[arg(long, value_enum, default_value_t = NvmeBackend::Sim, global = true)]
    pub backend: NvmeBackend,
    /// The local RDMA device (verbs), e.g. rxe1, or the UDP endpoint's
    /// address (udp), e.g. 10.10.2.2 or 10.10.2.2:4791.
    #[arg(long, global = true)]
    pub device: Option<String>,
    /// The UDP endpoint's active MTU (udp): 1024 fits a 1500-byte link.
    #[arg(long, default_value_t = 1024, global = true)]
    pub mtu: u32,
    /// Transport address of the target (default on sim: 10.0.0.2).
    #[arg(short = 'a', long = "traddr", global = true)]
    pub traddr: Option<Ipv4Addr>,
    /// Transport service id (port; default 4420).
    #[arg(short = 's', long = "trsvcid", global = true)]
    pub trsvcid: Option<u16>,
    /// Subsystem NQN (default on sim: the simulated target's).
    #[arg(short = 'n', long = "nqn", global = true)]
    pub nqn: Option<String>,
    /// Host NQN (default: derived from the host id).
    #[arg(short = 'q', long = "hostnqn", global = true)]
    pub hostnqn: Option<String>,
    /// Host id: 32 hex digits (default: a fixed rctb id).
    #[arg(short = 'I', long = "hostid", global = true)]
    pub hostid: Option<String>,
    /// I/O queue depth asked for.
    #[arg(short = 'Q', long = "queue-size", default_value_t = 128, global = true)]
    pub queue_depth: u16,
    /// I/O queues asked for (>= 1), each its own QP; `bench` spreads its
    /// reads over them round-robin (--qd in flight in all, so about qd/N per
    /// queue).
    #[arg(short = 'i', long = "nr-io-queues", default_value_t = 1, global = true)]
    pub io_queues: u16,
    /// How the initiator waits for completions: event (arm the CQs and
    /// sleep on their completion channels when nothing is ready; the
    /// default), busy (poll without sleeping, a whole CPU) or adaptive
    /// (poll, and sleep after --spin empty polls in a row).
    #[arg(long, global = true, value_parser = crate::cli::roce::args::poll_name, value_name = "busy|adaptive|event")]
    pub poll: Option<PollModeName>,
    /// Empty polls adaptive polling spins through before it sleeps (>= 1).
    #[arg(long, global = true, default_value_t = DEFAULT_SPIN, value_name = "N")]
    pub spin: u32,
    /// Keep-alive timeout in seconds (0: off).
    #[arg(short = 'k', long = "keep-alive-tmo", default_value_t = 0, global = true)]
    pub keep_alive: u64,
    /// Per-command timeout in seconds.
    #[arg(long, default_value_t = 10, global = true)]
    pub timeout: u64,
    /// Seed of the simulated fabric (default 1), or of `target`'s random faults.
    #[arg(long, global = true)]
    pub seed: Option<u64>,
    /// Pin the initiator's polling thread to these CPUs (`0` or `0,1`), as
    /// SPDK pins its reactors and fio its jobs with `cpus_allowed`; with
    /// `bench --jobs N`, job i runs on the i-th CPU of the list alone
    /// (round-robin). On soft-RoCE a pin also keeps each QP's packets in
    /// order: rxe sends from the CPU that rings the doorbell, and a thread
    /// that migrates sends one QP's packets through two CPUs' network
    /// backlogs, which can reorder them into retransmissions. Default: not
    /// pinned.
    #[arg(long, global = true, value_name = "LIST", value_delimiter = ',')]
    pub cpu: Vec<usize>,
}

#[derive(Debug, Args)]
pub struct NvmeArgs {
    #[command(subcommand)]
    pub op: NvmeOp,
    #[command(flatten)]
    pub common: Common,
}

/// What to transfer.
#[derive(Debug, Args)]
pub struct Io {
    /// Namespace id.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Starting block.
    #[arg(long, default_value_t = 0)]
    pub slba: u64,
    /// Bytes (a multiple of the block size; default: the data file's size, or one block).
    #[arg(long)]
    pub length: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum NvmeOp {
    /// Read the discovery log page (like `nvme discover`).
    Discover,
    /// Connect, print the controller, and disconnect.
    Connect,
    /// Identify the controller and every active namespace (or --nsid).
    Identify {
        #[arg(long)]
        nsid: Option<u32>,
    },
    /// Read blocks into a file (or print their FNV-1a checksum).
    Read {
        #[command(flatten)]
        io: Io,
        /// Write the data here.
        #[arg(short = 'o', long)]
        output: Option<PathBuf>,
    },
    /// Write blocks from a file (or a pattern when no file is given).
    Write {
        #[command(flatten)]
        io: Io,
        /// The data to write.
        #[arg(short = 'd', long)]
        data: Option<PathBuf>,
        /// Flush after writing.
        #[arg(long)]
        flush: bool,
    },
    /// Reads at a queue depth, random or sequential; prints a `BENCH` line
    /// (IOPS) as the VM bench table expects, e.g. `BENCH
    /// nvme-randread-4KiB-qd32 rctb 1650 IOPS` or `BENCH
    /// nvme-seqread-1MiB-qd1 rctb 9 IOPS`.
    Bench {
        #[arg(long, default_value_t = 1)]
        nsid: u32,
        /// Bytes per read (a multiple of the block size).
        #[arg(long, default_value_t = 4096)]
        bs: u64,
        /// Where the reads start: rand (a seeded generator's whole extents of
        /// --bs) or seq (consecutive extents from block 0, wrapping at the
        /// namespace's end).
        #[arg(long, value_enum, default_value_t = Pattern::Rand)]
        pattern: Pattern,
        /// Reads in flight.
        #[arg(long, default_value_t = 32)]
        qd: usize,
        /// Reads in all.
        #[arg(long, default_value_t = 2000)]
        ios: u64,
        /// Initiators, each on its own thread with its own controller
        /// (admin queue, -i I/O queues, QPs), started together; --qd and
        /// --ios are split over them, and the BENCH line counts every
        /// read over the slowest job's time. With --cpu, job i is pinned
        /// to the list's i-th CPU, as the kernel host keeps a queue per CPU.
        #[arg(long, default_value_t = 1)]
        jobs: usize,
    },
    /// Commit the namespace's volatile writes.
    Flush {
        #[arg(long, default_value_t = 1)]
        nsid: u32,
    },
    /// Serve the NVMe-oF target model for a real host (`nvme connect -t
    /// rdma -a ADDR -n NQN`) on a UDP endpoint (`--backend udp --device
    /// ADDR`) or an RDMA device (`--backend verbs --device rxe0`).
    Target(crate::cli::nvme_target::TargetArgs),
}

/// Where `bench` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Whole extents of `--bs` picked by a seeded generator.
    Rand,
    /// Consecutive extents of `--bs` from block 0, wrapping at the end.
    Seq,
}

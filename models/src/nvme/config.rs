//! The target's configuration, the faults a test sets, what it counts, and
//! its local errors.

use rctb_core::nvmeof::protocol::*;
use rctb_core::time::Duration;
use rctb_core::transport::InvalidValue;
use thiserror::Error;

use rctb_core::transport::TransportError;

/// One namespace of a subsystem.
// Not non_exhaustive: every field is the caller's choice (there is no
// default namespace), so callers build it whole. Growth goes in TargetConfig.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceConfig {
    /// Its namespace id (1-based, unique in the subsystem).
    pub nsid: u32,
    /// 512 or 4096 (any power of two 512..=65536 works).
    pub lba_size: u32,
    /// Its size in blocks.
    pub blocks: u64,
}

/// One NVM subsystem.
// Not non_exhaustive: an NQN and its namespaces, both the caller's choice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubsystemConfig {
    /// Its NQN (what a host's Connect names).
    pub nqn: String,
    /// Its namespaces.
    pub namespaces: Vec<NamespaceConfig>,
}

/// The target's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TargetConfig {
    /// The RDMA CM port it listens on (4420).
    pub port: u16,
    /// The NVM subsystems it serves.
    pub subsystems: Vec<SubsystemConfig>,
    /// Serve the discovery subsystem too.
    pub discovery: bool,
    /// MDTS as a power of two of 4 KiB pages (1..=12; the model stages data).
    pub mdts: u8,
    /// CAP.MQES: largest I/O queue, 0's based.
    pub mqes: u16,
    /// Identify Controller MAXCMD: commands outstanding per queue.
    pub maxcmd: u16,
    /// I/O command capsule size in 16-byte units (4 = no in-capsule data).
    pub ioccsz: u32,
    /// CAP.TO in 500 ms units.
    pub cap_to: u8,
    /// Time from CC.EN = 1 to CSTS.RDY = 1.
    pub ready_delay: Duration,
    /// I/O queues a controller may create.
    pub max_io_queues: u16,
    /// Keep-alive granularity reported (KAS, 100 ms units).
    pub kas: u16,
    /// Answer Connect with "authentication required" (AUTHREQ in DW0), as
    /// a target with DH-HMAC-CHAP configured does.
    pub require_auth: bool,
}

impl TargetConfig {
    /// One subsystem `nqn` with a 512-byte and a 4096-byte namespace.
    pub fn new(nqn: &str) -> Self {
        TargetConfig {
            port: NVME_RDMA_PORT,
            subsystems: vec![SubsystemConfig {
                nqn: nqn.into(),
                namespaces: vec![
                    NamespaceConfig { nsid: 1, lba_size: 512, blocks: 8192 },
                    NamespaceConfig { nsid: 2, lba_size: 4096, blocks: 1024 },
                ],
            }],
            discovery: true,
            mdts: 5,
            mqes: 127,
            maxcmd: 128,
            ioccsz: 4 + 4096 / 16,
            cap_to: 15,
            ready_delay: Duration::from_millis(20),
            max_io_queues: 4,
            kas: 10,
            require_auth: false,
        }
    }

    pub(super) fn validate(&self) -> Result<(), InvalidValue> {
        if !(1..=12).contains(&self.mdts) {
            return Err(InvalidValue::new(
                "mdts",
                self.mdts.into(),
                "the model needs 1..=12 (it stages whole transfers)",
            ));
        }
        if self.mqes == 0 {
            return Err(InvalidValue::new("mqes", 0, "at least 1 (a queue of 2)"));
        }
        if self.ioccsz < 4 {
            return Err(InvalidValue::new("ioccsz", self.ioccsz.into(), "at least 4 (the 64-byte command)"));
        }
        for s in &self.subsystems {
            for ns in &s.namespaces {
                if !ns.lba_size.is_power_of_two() || !(512..=65536).contains(&ns.lba_size) {
                    return Err(InvalidValue::new("lba_size", ns.lba_size.into(), "a power of two, 512..=65536"));
                }
                if ns.nsid == 0 || ns.blocks == 0 {
                    return Err(InvalidValue::new("nsid/blocks", ns.nsid.into(), "nsid and blocks must be non-zero"));
                }
            }
        }
        Ok(())
    }

    #[inline]
    pub(super) fn max_transfer(&self) -> u64 {
        max_transfer(4096, self.mdts)
    }
}

/// Faults the test controls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetFaults {
    /// Every response waits this long after the command finished.
    pub response_delay: Duration,
    /// The next this many responses are not sent (commands still execute).
    pub drop_responses: u32,
    /// The next this many responses name a command id nobody sent.
    pub wrong_cid_responses: u32,
    /// The faults above wait until the target has taken this many commands
    /// (so a fault meets I/O rather than the connect: counted, replayable).
    pub after_commands: u64,
    /// ... and until this many Writes have been taken (a host's bring-up
    /// and namespace scan only read: counting writes puts the fault on the
    /// application's I/O whatever the host asked first).
    pub after_writes: u64,
    /// The faults above meet I/O queues only (admin commands are answered
    /// normally).
    pub io_only: bool,
    /// The next this many Reads and Writes are answered with `error_status`
    /// (generic status code, DNR set: the host passes the error up) and
    /// not executed.
    pub error_io: u32,
    /// The status code of `error_io` (0, the default, means 0x06: Internal
    /// Error, as nvmet answers a failed backing device).
    pub error_status: u8,
    /// Drop every connection (DREQ to the host; the target stays up and
    /// keeps its data) when the Write that makes this many is taken (0:
    /// never). The host reconnects.
    pub disconnect_at_write: u64,
    /// Crash when the Write that makes this many is taken (0: never): it
    /// executes but is not answered, and the crash loses what was not
    /// flushed ([`NvmeTarget::crash`](super::NvmeTarget::crash)); the
    /// owner calls `restart`.
    pub crash_at_write: u64,
}

/// Faults drawn at random, from a seed, on each Read and Write once the
/// counted faults' start (`after_commands`, `after_writes`) has passed:
/// the same commands in the same order meet the same faults. Rates are in
/// parts per million of I/O commands; each kind draws on its own, in the
/// order error, drop, delay, so raising one rate does not move another's
/// picks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RandomFaults {
    /// The seed (`SeededRng::child(seed, "nvme-target-faults")`).
    pub seed: u64,
    /// Answered with `TargetFaults::error_status` (DNR set), not executed.
    pub error_ppm: u32,
    /// Executed, never answered.
    pub drop_ppm: u32,
    /// Executed, answered `delay` late.
    pub delay_ppm: u32,
    /// How late a delayed response comes.
    pub delay: Duration,
}

impl RandomFaults {
    pub(super) fn validate(&self) -> Result<(), InvalidValue> {
        for (field, v) in [("error_ppm", self.error_ppm), ("drop_ppm", self.drop_ppm), ("delay_ppm", self.delay_ppm)] {
            if v > 1_000_000 {
                return Err(InvalidValue::new(field, v.into(), "parts per million: at most 1000000"));
            }
        }
        Ok(())
    }

    pub(super) fn any(&self) -> bool {
        self.error_ppm > 0 || self.drop_ppm > 0 || self.delay_ppm > 0
    }
}

/// What the target counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetStats {
    /// Command capsules received.
    pub commands: u64,
    /// Commands answered with an error status.
    pub errors: u64,
    /// Reads executed.
    pub reads: u64,
    /// Writes executed.
    pub writes: u64,
    /// Flushes executed.
    pub flushes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Of the writes, those whose data came in the capsule.
    pub in_capsule_writes: u64,
    /// Responses never sent (a fault).
    pub dropped_responses: u64,
    /// Keep Alive commands.
    pub keep_alives: u64,
    /// Crashes (a fault, or `crash`).
    pub crashes: u64,
    /// Connect requests refused (bad private data, down, no subsystem).
    pub rejected_connects: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Times every connection was dropped (`disconnect_at_write`).
    pub dropped_connections: u64,
    /// Faults [`RandomFaults`] picked: error statuses ...
    pub random_errors: u64,
    /// ... responses dropped ...
    pub random_drops: u64,
    /// ... responses delayed.
    pub random_delays: u64,
}

/// Local failures of the model (transport misuse, not host errors).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TargetError {
    /// A configuration value broke its rule (named).
    #[error("target config: {0}")]
    Config(#[from] InvalidValue),
    /// A verb of the target's transport failed.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The [`DurableStore`](super::DurableStore) failed.
    #[error("namespace store: {0}")]
    Store(String),
}

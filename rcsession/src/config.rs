//! Configuration of the session server: limits, deadlines, slots and the
//! few QP attributes a deployment may tune.

use crate::time::Duration;

/// Resource limits, checked at PREPARE in field order. Zero blocks every
/// PREPARE, except `max_user_qps`, where zero means unlimited (each session
/// owns one QP, so it bounds the user's session count like the global one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// Live sessions on the whole server.
    pub max_sessions: u32,
    /// Staging bytes (the sum of the live sessions' sizes) on the whole
    /// server.
    pub max_staging_bytes: u64,
    /// QPs on the whole server (one per session).
    pub max_qps: u32,
    /// Live sessions per principal.
    pub max_user_sessions: u32,
    /// Staging bytes per principal.
    pub max_user_staging_bytes: u64,
    /// QPs per principal; 0 = unlimited.
    pub max_user_qps: u32,
}

impl Limits {
    /// Generous limits for tests and tools (1024 sessions, 1 GiB staging,
    /// per user the same; per-user QPs unlimited).
    pub const fn generous() -> Self {
        Limits {
            max_sessions: 1024,
            max_staging_bytes: 1 << 30,
            max_qps: 1024,
            max_user_sessions: 1024,
            max_user_staging_bytes: 1 << 30,
            max_user_qps: 0,
        }
    }
}

/// READY slots when `max_ready_slots` is 0.
pub const DEFAULT_READY_SLOTS: u32 = 64;
/// Staging slots when `max_stage_slots` is 0.
pub const DEFAULT_STAGE_SLOTS: u32 = 32;

/// The session server's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// IB port (1-based; 0 is taken as 1, as the reference server does).
    pub port: u8,
    /// Source GID index for RTR (rxe and the simulator: 1 is the IPv4 GID).
    pub gid_index: u32,
    /// What PREPARE may take ([`Limits::generous`] by default).
    pub limits: Limits,
    /// PREPARE -> READY window; zero disables the deadline.
    pub t_prep: Duration,
    /// READY -> finished window, and the data phase's deadline; zero
    /// disables both (a data phase then waits as long as RC retries).
    pub t_exec: Duration,
    /// Concurrent READYs (0 = 64).
    pub max_ready_slots: u32,
    /// Concurrent stagings (0 = 32).
    pub max_stage_slots: u32,
    /// RTS transport retries (§3: 7).
    pub retry_cnt: u8,
    /// RTS RNR retries (§3: 7 = forever). Tests lower it to reach BUSY.
    pub rnr_retry: u8,
    /// RTS local ACK timeout code (§3: 14).
    pub timeout: u8,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            port: 1,
            gid_index: 1,
            limits: Limits::generous(),
            t_prep: Duration::from_secs(30),
            t_exec: Duration::from_secs(30),
            max_ready_slots: 0,
            max_stage_slots: 0,
            retry_cnt: 7,
            rnr_retry: 7,
            timeout: 14,
        }
    }
}

impl ServerConfig {
    pub(super) fn ready_slots(&self) -> u32 {
        if self.max_ready_slots == 0 { DEFAULT_READY_SLOTS } else { self.max_ready_slots }
    }

    pub(super) fn stage_slots(&self) -> u32 {
        if self.max_stage_slots == 0 { DEFAULT_STAGE_SLOTS } else { self.max_stage_slots }
    }

    pub(super) fn port(&self) -> u8 {
        self.port.max(1)
    }
}

//! Transport time: a monotonic instant counted in nanoseconds from the
//! transport's own epoch.
//!
//! The simulator's clock is virtual (it jumps to the next event); the verbs
//! backend maps its monotonic clock onto the same type. Nothing in core reads a
//! clock: time always comes from `Transport::now`.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};

pub use std::time::Duration;

/// A point in transport time, in nanoseconds since the transport's epoch.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The transport's epoch; the simulator's clock starts here.
    pub const ZERO: Instant = Instant(0);
    /// A deadline that never comes.
    pub const FAR_FUTURE: Instant = Instant(u64::MAX);

    /// The instant `nanos` nanoseconds after the epoch.
    pub const fn from_nanos(nanos: u64) -> Self {
        Instant(nanos)
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self + d`, or `None` when the sum passes `u64::MAX` nanoseconds
    /// (about 584 years); `+` saturates to [`Instant::FAR_FUTURE`] instead.
    pub fn checked_add(self, d: Duration) -> Option<Instant> {
        u64::try_from(d.as_nanos()).ok().and_then(|n| self.0.checked_add(n)).map(Instant)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    /// Saturates at [`Instant::FAR_FUTURE`].
    fn add(self, d: Duration) -> Instant {
        self.checked_add(d).unwrap_or(Instant::FAR_FUTURE)
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_duration_since(rhs)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Instant {
    /// Seconds with nanosecond precision: `t=0.000123456`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t={}.{:09}", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

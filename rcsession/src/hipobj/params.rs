//! The `x-amz-rdma-*` parameters of PREPARE, READY and CANCEL: parsers with
//! the rules of docs/protocols.md §3.4, and the reply formats.
//!
//! Values are parsed strictly: decimal means ASCII digits only, hex means
//! bare hex digits (no `0x`, no sign, no spaces), so one value has few
//! spellings and nothing is guessed.

use std::fmt;

use thiserror::Error;

/// The protocol name every request and reply carries.
pub const PROTOCOL: &str = "hipobj-rc-v2";
/// `offset + size` (and `size`) are at most this.
pub const MAX_OFFSET_PLUS_SIZE: u64 = 0x7FFF_FFFF;
/// Targets longer than this are TRUNC.
pub const MAX_TARGET_LEN: usize = 2047;

/// A parameter that broke a rule.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ParamError {
    /// ARG: the value is malformed or out of range.
    #[error("x-amz-rdma-{field}: {rule}")]
    Invalid {
        /// The field name, without the `x-amz-rdma-` prefix.
        field: &'static str,
        /// The rule broken, e.g. "must be non-zero".
        rule: &'static str,
    },
    /// TRUNC: the value is longer than the protocol carries.
    #[error("x-amz-rdma-{field}: {len} bytes, at most {max}")]
    TooLong {
        /// The field name, without the `x-amz-rdma-` prefix.
        field: &'static str,
        /// The value's length in bytes.
        len: usize,
        /// The longest value allowed, in bytes.
        max: usize,
    },
}

fn invalid(field: &'static str, rule: &'static str) -> ParamError {
    ParamError::Invalid { field, rule }
}

/// The operation of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    /// The server writes the object into the client's memory.
    Get = 0,
    /// The client writes the object into the server's staging region.
    Put = 1,
}

impl Op {
    /// The ABI value (0 = GET, 1 = PUT); anything else is ARG.
    pub fn from_abi(v: u8) -> Option<Op> {
        match v {
            0 => Some(Op::Get),
            1 => Some(Op::Put),
            _ => None,
        }
    }

    /// The upper-case wire name, `GET` or `PUT`.
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "GET",
            Op::Put => "PUT",
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `protocol`: must be `hipobj-rc-v2`.
pub fn parse_protocol(s: &str) -> Result<(), ParamError> {
    if s == PROTOCOL { Ok(()) } else { Err(invalid("protocol", "must be hipobj-rc-v2")) }
}

/// `op`: GET or PUT, any case.
pub fn parse_op(s: &str) -> Result<Op, ParamError> {
    if s.eq_ignore_ascii_case("GET") {
        Ok(Op::Get)
    } else if s.eq_ignore_ascii_case("PUT") {
        Ok(Op::Put)
    } else {
        Err(invalid("op", "must be GET or PUT"))
    }
}

fn decimal(field: &'static str, s: &str) -> Result<u64, ParamError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(invalid(field, "must be a decimal number (digits only)"));
    }
    s.parse().map_err(|_| invalid(field, "does not fit 64 bits"))
}

fn hex(field: &'static str, s: &str, max: u64) -> Result<u64, ParamError> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(invalid(field, "must be bare hex digits"));
    }
    let digits = s.trim_start_matches('0');
    let v = match digits {
        "" => 0,
        d if d.len() > 16 => return Err(invalid(field, "out of range")),
        d => u64::from_str_radix(d, 16).map_err(|_| invalid(field, "must be bare hex digits"))?,
    };
    if v > max {
        return Err(invalid(field, "out of range"));
    }
    Ok(v)
}

/// `size`: decimal, 1..=0x7FFFFFFF.
pub fn parse_size(s: &str) -> Result<u64, ParamError> {
    let v = decimal("size", s)?;
    if v == 0 || v > MAX_OFFSET_PLUS_SIZE {
        return Err(invalid("size", "must be 1..=2147483647"));
    }
    Ok(v)
}

/// `offset`: decimal (its bound against `size` is PREPARE's rule).
pub fn parse_offset(s: &str) -> Result<u64, ParamError> {
    decimal("offset", s)
}

/// `psn`: bare hex, 1..=0xFFFFFF.
pub fn parse_psn(s: &str) -> Result<u32, ParamError> {
    match hex("psn", s, 0xFF_FFFF)? {
        0 => Err(invalid("psn", "must be 1..=0xFFFFFF")),
        v => Ok(v as u32),
    }
}

/// `cookie`: bare hex, 32-bit, non-zero.
pub fn parse_cookie(s: &str) -> Result<u32, ParamError> {
    match hex("cookie", s, u32::MAX as u64)? {
        0 => Err(invalid("cookie", "must be non-zero")),
        v => Ok(v as u32),
    }
}

/// READY's `qpn`: bare hex, 24-bit. A client's RC QP is never QP 0 (QP 0
/// is the subnet management QP), so 0 means what §3's C-layer data phase
/// gives it: "no QP", the control-plane-only test mode (no data moves,
/// the reply says `size` bytes). The parser accepts it; the HTTP route
/// refuses it (400, §3a) unless the gateway was started in that test mode.
pub fn parse_qpn(s: &str) -> Result<u32, ParamError> {
    hex("qpn", s, 0xFF_FFFF).map(|v| v as u32)
}

/// READY's `mr-addr` (bare hex u64).
pub fn parse_mr_addr(s: &str) -> Result<u64, ParamError> {
    hex("mr-addr", s, u64::MAX)
}

/// READY's `mr-rkey` (bare hex u32).
pub fn parse_mr_rkey(s: &str) -> Result<u32, ParamError> {
    hex("mr-rkey", s, u32::MAX as u64).map(|v| v as u32)
}

/// A PREPARE target: `/bucket/key[?query]`, each path segment
/// percent-encoded. Longer than 2047 bytes is TRUNC. The query is not
/// judged here: which queries a route takes depends on the op and the
/// server's part limit (docs/protocols.md §3a.2), so the gateway classifies it,
/// before any session exists.
pub fn parse_target(s: &str) -> Result<&str, ParamError> {
    if s.len() > MAX_TARGET_LEN {
        return Err(ParamError::TooLong { field: "target", len: s.len(), max: MAX_TARGET_LEN });
    }
    let path = s.split_once('?').map_or(s, |(p, _)| p);
    let rest = path.strip_prefix('/').ok_or(invalid("target", "must start with /"))?;
    let (bucket, key) = rest.split_once('/').ok_or(invalid("target", "must be /bucket/key"))?;
    if bucket.is_empty() || key.is_empty() {
        return Err(invalid("target", "bucket and key must be non-empty"));
    }
    for segment in std::iter::once(bucket).chain(key.split('/')) {
        check_percent_encoded(segment)?;
    }
    Ok(s)
}

fn check_percent_encoded(segment: &str) -> Result<(), ParamError> {
    let b = segment.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let ok = b.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit));
                if !ok {
                    return Err(invalid("target", "% must be followed by two hex digits"));
                }
                i += 3;
            }
            c if c.is_ascii_alphanumeric() || b"-._~!$'()*+,;=:@".contains(&c) => i += 1,
            _ => return Err(invalid("target", "segments must be percent-encoded")),
        }
    }
    Ok(())
}

/// A reply's `psn`: `%06X`.
pub fn format_psn(psn: u32) -> String {
    format!("{psn:06X}")
}

/// A reply's `cookie`: `%08X`.
pub fn format_hex_u32(v: u32) -> String {
    format!("{v:08X}")
}

/// A session id: 128 random bits, written as 32 lowercase hex digits.
///
/// The session manager draws them; everyone else gets one from
/// [`SessionId::parse`] (a peer's id arrives as text), so no code path
/// builds an id from a guessed number.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SessionId(pub(crate) u128);

impl SessionId {
    /// Parses exactly 32 lowercase hex digits. The gateway answers a
    /// malformed id as it answers an unknown one (NO_SESSION), so the shape
    /// of ids reveals nothing.
    pub fn parse(s: &str) -> Result<Self, ParamError> {
        if s.len() != 32 || !s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
            return Err(invalid("session", "must be 32 lowercase hex digits"));
        }
        u128::from_str_radix(s, 16).map(SessionId).map_err(|_| invalid("session", "must be 32 lowercase hex digits"))
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_op("get"), Ok(Op::Get));
        assert_eq!(parse_op("Put"), Ok(Op::Put));
        assert!(matches!(parse_op("POST"), Err(ParamError::Invalid { field: "op", .. })));
        assert_eq!(parse_size("2147483647"), Ok(0x7FFF_FFFF));
        for bad in ["0", "2147483648", "-1", "+1", " 1", "1e3", "", "0x10"] {
            assert!(matches!(parse_size(bad), Err(ParamError::Invalid { field: "size", .. })), "{bad}");
        }
        assert_eq!(parse_offset("0"), Ok(0));
        assert_eq!(parse_psn("FFFFFF"), Ok(0xFF_FFFF));
        assert_eq!(parse_psn("00abc"), Ok(0xabc));
        for bad in ["0", "1000000", "0x1", "", "g"] {
            assert!(matches!(parse_psn(bad), Err(ParamError::Invalid { field: "psn", .. })), "{bad}");
        }
        assert_eq!(parse_cookie("DEADbeef"), Ok(0xdead_beef));
        assert!(matches!(parse_cookie("0"), Err(ParamError::Invalid { field: "cookie", .. })));
        assert!(matches!(parse_cookie("100000000"), Err(ParamError::Invalid { field: "cookie", .. })));
        assert_eq!(parse_qpn("0"), Ok(0), "0 is the control-plane-only mode");
        assert_eq!(parse_qpn("ffffff"), Ok(0xFF_FFFF));
        assert!(matches!(parse_qpn("1000000"), Err(ParamError::Invalid { field: "qpn", .. })));
        assert_eq!(parse_mr_addr("ffffffffffffffff"), Ok(u64::MAX));
        assert!(matches!(parse_mr_addr("10000000000000000"), Err(ParamError::Invalid { field: "mr-addr", .. })));
        assert_eq!(parse_mr_rkey("0"), Ok(0));
        assert_eq!(format_psn(0xab), "0000AB");
        assert_eq!(format_hex_u32(0xab), "000000AB");
        assert!(parse_protocol("hipobj-rc-v2").is_ok());
        assert!(matches!(parse_protocol("hipobj-rc-v1"), Err(ParamError::Invalid { field: "protocol", .. })));
    }

    #[test]
    fn targets() {
        assert!(parse_target("/b/k").is_ok());
        assert!(parse_target("/b/dir/k%20x").is_ok());
        assert!(parse_target("/b/k?partNumber=3&uploadId=abc").is_ok());
        // The query is the gateway's to classify (§3a).
        assert!(parse_target("/b/k?partNumber=1").is_ok());
        assert!(parse_target("/b/a%2Fb").is_ok());
        for bad in ["b/k", "/b", "/b/", "//k", "/b/k x", "/b/k%2", "/b/k%zz?partNumber=1"] {
            assert!(matches!(parse_target(bad), Err(ParamError::Invalid { field: "target", .. })), "{bad}");
        }
        let long = format!("/b/{}", "k".repeat(2044));
        assert!(parse_target(&long).is_ok());
        assert_eq!(
            parse_target(&format!("{long}k")),
            Err(ParamError::TooLong { field: "target", len: 2048, max: 2047 })
        );
    }

    proptest! {
        #[test]
        fn session_ids_round_trip(v in any::<u128>()) {
            let s = SessionId(v).to_string();
            prop_assert_eq!(s.len(), 32);
            prop_assert_eq!(SessionId::parse(&s), Ok(SessionId(v)));
            let refused = matches!(SessionId::parse(&s.to_uppercase()), Err(ParamError::Invalid { field: "session", .. }));
            prop_assert!(refused || s.bytes().all(|c| c.is_ascii_digit()));
        }

        #[test]
        fn hex_parsers_agree_with_format(v in 1u32..=u32::MAX) {
            prop_assert_eq!(parse_cookie(&format_hex_u32(v)), Ok(v));
            prop_assert_eq!(parse_cookie(&format!("{v:x}")), Ok(v));
        }
    }
}

//! The RDMA token: 44 packed bytes in host byte order (little-endian here),
//! carried as 88 hex digits, optionally followed by `:addr:size`.
//!
//! | offset | field | size |
//! | --- | --- | --- |
//! | 0 | transport (DC 0, RC 1) | u8 |
//! | 1 | QP number | u32 |
//! | 5 | GID | 16 bytes |
//! | 21 | rkey | u32 |
//! | 25 | remote address | u64 |
//! | 33 | length | u64 |
//! | 41 | port | u8 |
//! | 42 | LID | u16 |
//!
//! All zeros means loopback (the server uses its own GID). GID bytes 10..11
//! = ff ff mean bytes 12..15 are the client's IPv4 address.

use std::fmt;
use std::net::Ipv4Addr;

use thiserror::Error;

use crate::transport::Gid;

/// Bytes of a token.
pub const TOKEN_LEN: usize = 44;
/// Hex digits of a token (without suffix).
pub const TOKEN_HEX_LEN: usize = 2 * TOKEN_LEN;

/// The transport a token names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Byte 0 = 0: Dynamically Connected. Decodes, but
    /// [`ClientToken::parse`] refuses it with [`TokenError::NotRc`].
    Dc,
    /// Byte 0 = 1: Reliable Connected, the only transport served.
    Rc,
    /// Any other byte: decodes, but the session server refuses it (ARG).
    Other(u8),
}

impl Transport {
    fn from_byte(b: u8) -> Self {
        match b {
            0 => Transport::Dc,
            1 => Transport::Rc,
            other => Transport::Other(other),
        }
    }

    fn byte(self) -> u8 {
        match self {
            Transport::Dc => 0,
            Transport::Rc => 1,
            Transport::Other(b) => b,
        }
    }
}

/// A decoded token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaToken {
    /// Transport (byte 0).
    pub transport: Transport,
    /// QP number of the endpoint the token names (bytes 1..5).
    pub qpn: u32,
    /// GID (bytes 5..21); IPv4-mapped when bytes 10..11 are ff ff (see
    /// [`ipv4`](Self::ipv4)).
    pub gid: Gid,
    /// rkey of the endpoint's memory region (bytes 21..25).
    pub rkey: u32,
    /// Address of that memory region (bytes 25..33).
    pub remote_addr: u64,
    /// Length of that region in bytes (bytes 33..41).
    pub length: u64,
    /// Port number (byte 41).
    pub port: u8,
    /// LID (bytes 42..44).
    pub lid: u16,
}

/// The optional `:addr:size` suffix (each 1..16 hex digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenSuffix {
    /// The address part, 1..16 hex digits.
    pub addr: u64,
    /// The size part, 1..16 hex digits.
    pub size: u64,
}

/// A token as a client sends it in PREPARE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientToken {
    /// All zeros: same-host loopback.
    Loopback,
    /// An RC endpoint, with the suffix when one was given.
    Rc {
        /// The decoded token; its transport is [`Transport::Rc`].
        token: RdmaToken,
        /// The `:addr:size` suffix, when one was given.
        suffix: Option<TokenSuffix>,
    },
}

/// Why a token does not decode.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The text before any `:` is not exactly [`TOKEN_HEX_LEN`] characters
    /// (an empty token also lands here).
    #[error("token: {len} hex digits before the suffix, must be exactly {TOKEN_HEX_LEN}")]
    Length {
        /// Its length in bytes.
        len: usize,
    },
    /// One of the 88 characters is not a hex digit.
    #[error("token: byte {at} is not a hex digit")]
    NotHex {
        /// Its byte index in the token, from 0.
        at: usize,
    },
    /// The `:addr:size` suffix is malformed: a part is missing, empty, longer
    /// than 16 digits or not hex.
    #[error("token suffix {part}: {rule}")]
    Suffix {
        /// The bad part, `"addr"` or `"size"`.
        part: &'static str,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// Byte 0 names a transport other than RC; carries that byte (ARG at the
    /// session layer).
    #[error("token: transport {0} is not RC (1)")]
    NotRc(u8),
}

impl RdmaToken {
    /// An RC token for an endpoint (the server's reply token).
    pub fn rc(qpn: u32, gid: Gid, port: u8) -> Self {
        RdmaToken { transport: Transport::Rc, qpn, gid, rkey: 0, remote_addr: 0, length: 0, port, lid: 0 }
    }

    /// The 44 packed bytes, multi-byte fields little-endian.
    pub fn to_bytes(&self) -> [u8; TOKEN_LEN] {
        let mut b = [0u8; TOKEN_LEN];
        b[0] = self.transport.byte();
        b[1..5].copy_from_slice(&self.qpn.to_le_bytes());
        b[5..21].copy_from_slice(&self.gid.0);
        b[21..25].copy_from_slice(&self.rkey.to_le_bytes());
        b[25..33].copy_from_slice(&self.remote_addr.to_le_bytes());
        b[33..41].copy_from_slice(&self.length.to_le_bytes());
        b[41] = self.port;
        b[42..44].copy_from_slice(&self.lid.to_le_bytes());
        b
    }

    /// Reads 44 packed bytes; never fails (an unknown transport byte becomes
    /// [`Transport::Other`]).
    pub fn from_bytes(b: &[u8; TOKEN_LEN]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[5..21]);
        RdmaToken {
            transport: Transport::from_byte(b[0]),
            qpn: u32_at(1),
            gid: Gid(gid),
            rkey: u32_at(21),
            remote_addr: u64_at(25),
            length: u64_at(33),
            port: b[41],
            lid: u16::from_le_bytes([b[42], b[43]]),
        }
    }

    /// 88 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(TOKEN_HEX_LEN);
        for byte in self.to_bytes() {
            s.push_str(&format!("{byte:02x}"));
        }
        s
    }

    /// Decodes exactly 88 hex digits (either case).
    pub fn from_hex(hex: &str) -> Result<Self, TokenError> {
        let raw = hex.as_bytes();
        if raw.len() != TOKEN_HEX_LEN {
            return Err(TokenError::Length { len: raw.len() });
        }
        let mut b = [0u8; TOKEN_LEN];
        for (i, out) in b.iter_mut().enumerate() {
            let hi = hex_val(raw[2 * i]).ok_or(TokenError::NotHex { at: 2 * i })?;
            let lo = hex_val(raw[2 * i + 1]).ok_or(TokenError::NotHex { at: 2 * i + 1 })?;
            *out = hi << 4 | lo;
        }
        Ok(Self::from_bytes(&b))
    }

    /// The client's IPv4 address when the GID is IPv4-mapped (bytes 10..11 = ff ff).
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let g = &self.gid.0;
        (g[10] == 0xff && g[11] == 0xff).then(|| Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }
}

impl fmt::Display for RdmaToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl ClientToken {
    /// Parses a PREPARE token (callers treat an absent or empty header as
    /// "no token"): all `0` digits is loopback; otherwise 88 hex
    /// digits, optionally `:addr:size`, naming an RC endpoint.
    pub fn parse(s: &str) -> Result<Self, TokenError> {
        // Any run of `0` digits is the loopback marker, as the reference
        // server reads it (it checks for all zeros before decoding).
        if !s.is_empty() && s.bytes().all(|c| c == b'0') {
            return Ok(ClientToken::Loopback);
        }
        let (base, suffix) = match s.split_once(':') {
            None => (s, None),
            Some((base, rest)) => {
                let (addr, size) =
                    rest.split_once(':').ok_or(TokenError::Suffix { part: "size", rule: "missing (`:addr:size`)" })?;
                let addr = suffix_part("addr", addr)?;
                let size = suffix_part("size", size)?;
                (base, Some(TokenSuffix { addr, size }))
            }
        };
        let token = RdmaToken::from_hex(base)?;
        match token.transport {
            Transport::Rc => Ok(ClientToken::Rc { token, suffix }),
            other => Err(TokenError::NotRc(other.byte())),
        }
    }

    /// The wire form of a loopback token.
    pub fn loopback_hex() -> String {
        "0".repeat(TOKEN_HEX_LEN)
    }
}

fn suffix_part(part: &'static str, s: &str) -> Result<u64, TokenError> {
    if s.is_empty() || s.len() > 16 {
        return Err(TokenError::Suffix { part, rule: "must be 1..16 hex digits" });
    }
    if !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(TokenError::Suffix { part, rule: "must be hex digits only" });
    }
    u64::from_str_radix(s, 16).map_err(|_| TokenError::Suffix { part, rule: "must be 1..16 hex digits" })
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample() -> RdmaToken {
        RdmaToken {
            transport: Transport::Rc,
            qpn: 0x0012_3456,
            gid: Gid::from_ipv4(Ipv4Addr::new(10, 10, 0, 2)),
            rkey: 0xdead_beef,
            remote_addr: 0x7f00_1234_5000,
            length: 1 << 20,
            port: 1,
            lid: 0xabcd,
        }
    }

    #[test]
    fn layout_matches_the_table() {
        let hex = sample().to_hex();
        assert_eq!(hex.len(), 88);
        // transport 01, qpn 56 34 12 00 (little-endian), then the GID.
        assert!(hex.starts_with("0156341200"), "{hex}");
        assert_eq!(&hex[10..42], "00000000000000000000ffff0a0a0002");
        assert_eq!(&hex[42..50], "efbeadde");
        assert_eq!(&hex[82..84], "01");
        assert_eq!(&hex[84..88], "cdab");
        assert_eq!(sample().ipv4(), Some(Ipv4Addr::new(10, 10, 0, 2)));
    }

    #[test]
    fn client_tokens() {
        let hex = sample().to_hex();
        assert_eq!(ClientToken::parse(&hex), Ok(ClientToken::Rc { token: sample(), suffix: None }));
        assert_eq!(
            ClientToken::parse(&format!("{}:1f:A0", hex.to_uppercase())),
            Ok(ClientToken::Rc { token: sample(), suffix: Some(TokenSuffix { addr: 0x1f, size: 0xa0 }) })
        );
        assert_eq!(ClientToken::parse(&ClientToken::loopback_hex()), Ok(ClientToken::Loopback));
        assert_eq!(ClientToken::parse("00"), Ok(ClientToken::Loopback));
        assert_eq!(ClientToken::parse(""), Err(TokenError::Length { len: 0 }));
        assert_eq!(ClientToken::parse(&hex[..86]), Err(TokenError::Length { len: 86 }));
        let mut bad = hex.clone();
        bad.replace_range(7..8, "g");
        assert_eq!(ClientToken::parse(&bad), Err(TokenError::NotHex { at: 7 }));
        let mut dc = hex.clone();
        dc.replace_range(0..2, "00");
        assert_eq!(ClientToken::parse(&dc), Err(TokenError::NotRc(0)));
        for (suffix, part) in [
            (":1", "size"),
            ("::1", "addr"),
            (":1:", "size"),
            (":12345678901234567:1", "addr"),
            (":1:x", "size"),
            (":1:2:3", "size"),
        ] {
            match ClientToken::parse(&format!("{hex}{suffix}")) {
                Err(TokenError::Suffix { part: p, .. }) => assert_eq!(p, part, "{suffix}"),
                other => panic!("{suffix}: {other:?}"),
            }
        }
    }

    proptest! {
        #[test]
        fn bytes_round_trip(bytes in proptest::array::uniform32(any::<u8>()), tail in proptest::array::uniform12(any::<u8>())) {
            let mut b = [0u8; TOKEN_LEN];
            b[..32].copy_from_slice(&bytes);
            b[32..].copy_from_slice(&tail);
            let t = RdmaToken::from_bytes(&b);
            prop_assert_eq!(t.to_bytes(), b);
            prop_assert_eq!(RdmaToken::from_hex(&t.to_hex()), Ok(t));
        }

        #[test]
        fn parse_never_panics(s in "[0-9a-fA-F:xz]{0,120}") {
            let _ = ClientToken::parse(&s);
        }
    }
}

//! The optional checksum header: `CRC64NVME ` followed by 12 base64
//! characters encoding the 8-byte CRC-64/NVME of the object, big-endian (as
//! S3's `x-amz-checksum-crc64nvme`). The 12th character is the `=` pad and
//! the 11th carries two unused low bits that must be zero: exactly one text
//! per value, so a header cannot be smuggled in two spellings.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use thiserror::Error;

/// The algorithm prefix, including its separating space.
const PREFIX: &str = "CRC64NVME ";
const B64_LEN: usize = 12;

static CRC64_NVME: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_NVME);

/// CRC-64/NVME of `data`.
pub fn crc64nvme(data: &[u8]) -> u64 {
    CRC64_NVME.checksum(data)
}

/// A parsed checksum header value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc64Nvme(pub u64);

/// Why a checksum header is refused (the session layer answers ARG).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ChecksumError {
    /// The value does not start with `CRC64NVME ` (upper case, one space).
    #[error("checksum: must start with {PREFIX:?}")]
    Prefix,
    /// The text after the prefix is not exactly 12 characters long.
    #[error("checksum: {len} base64 characters, must be exactly {B64_LEN}")]
    Length {
        /// Its length in bytes.
        len: usize,
    },
    /// The 12th character is not `=`, or `=` appears earlier (only a single
    /// `=` pad is allowed).
    #[error("checksum: the 12th character must be the `=` pad")]
    Padding,
    /// A character outside the standard base64 alphabet (`A-Z a-z 0-9 + /`).
    #[error("checksum: character {at} is not base64")]
    NotBase64 {
        /// Its index after the prefix, from 0.
        at: usize,
    },
    /// The 11th character has a non-zero bit in its two unused low bits, so the
    /// text is not the one spelling of its value.
    #[error("checksum: the 11th character must have its two unused low bits zero")]
    TrailingBits,
}

impl Crc64Nvme {
    /// The checksum of `data`.
    pub fn of(data: &[u8]) -> Self {
        Crc64Nvme(crc64nvme(data))
    }

    /// Parses a header value `CRC64NVME <12 base64>`.
    pub fn parse(header: &str) -> Result<Self, ChecksumError> {
        let b64 = header.strip_prefix(PREFIX).ok_or(ChecksumError::Prefix)?;
        if b64.len() != B64_LEN {
            return Err(ChecksumError::Length { len: b64.len() });
        }
        if !b64.ends_with('=') || b64[..B64_LEN - 1].contains('=') {
            return Err(ChecksumError::Padding);
        }
        let bytes = STANDARD.decode(b64).map_err(|e| match e {
            base64::DecodeError::InvalidByte(at, _) => ChecksumError::NotBase64 { at },
            base64::DecodeError::InvalidLastSymbol { .. } => ChecksumError::TrailingBits,
            base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => ChecksumError::Padding,
        })?;
        let bytes: [u8; 8] = bytes.try_into().map_err(|_| ChecksumError::Padding)?;
        Ok(Crc64Nvme(u64::from_be_bytes(bytes)))
    }

    /// The header value.
    pub fn to_header(self) -> String {
        format!("{PREFIX}{}", STANDARD.encode(self.0.to_be_bytes()))
    }
}

impl fmt::Display for Crc64Nvme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_header())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn catalogue_check_value() {
        // CRC-64/NVME check value (the CRC of "123456789") from the CRC catalogue.
        assert_eq!(crc64nvme(b"123456789"), 0xae8b_1486_0a79_9888);
        assert_eq!(Crc64Nvme::of(b"123456789").to_header(), "CRC64NVME rosUhgp5mIg=");
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5mIg="), Ok(Crc64Nvme(0xae8b_1486_0a79_9888)));
    }

    #[test]
    fn every_rule_has_its_error() {
        assert_eq!(Crc64Nvme::parse("crc64nvme rosUhgp5mIg="), Err(ChecksumError::Prefix));
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5mI="), Err(ChecksumError::Length { len: 11 }));
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5mIgA"), Err(ChecksumError::Padding));
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5m=="), Err(ChecksumError::Length { len: 11 }));
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5m==="), Err(ChecksumError::Padding));
        assert_eq!(Crc64Nvme::parse("CRC64NVME ro*Uhgp5mIg="), Err(ChecksumError::NotBase64 { at: 2 }));
        // 'h' = 33 = 0b100001: low bits set.
        assert_eq!(Crc64Nvme::parse("CRC64NVME rosUhgp5mIh="), Err(ChecksumError::TrailingBits));
    }

    proptest! {
        #[test]
        fn round_trip(v in any::<u64>()) {
            let h = Crc64Nvme(v).to_header();
            prop_assert_eq!(h.len(), PREFIX.len() + B64_LEN);
            prop_assert_eq!(Crc64Nvme::parse(&h), Ok(Crc64Nvme(v)));
        }

        #[test]
        fn parse_never_panics(s in "CRC64NVME [A-Za-z0-9+/=*]{0,14}") {
            if let Ok(c) = Crc64Nvme::parse(&s) {
                prop_assert_eq!(c.to_header(), s);
            }
        }
    }
}

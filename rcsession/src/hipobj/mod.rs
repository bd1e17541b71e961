//! hipobj-rc-v2 control-plane codecs (docs/protocols.md §3): the 44-byte RDMA
//! token, the principal digest, the `CRC64NVME` checksum header and the
//! `x-amz-rdma-*` request parameters.
//!
//! Pure functions over strings and bytes: every rule broken is a typed error
//! that names the field and the rule, which the session layer maps to the
//! ARG (or TRUNC) status. Nothing here knows about sessions or transports.

mod checksum;
mod headers;
mod params;
mod principal;
mod token;

pub use checksum::{ChecksumError, Crc64Nvme, crc64nvme};
pub use headers::{CancelHeaders, HEADER_PREFIX, HeaderError, PrepareHeaders, ReadyHeaders};
pub use params::{
    MAX_OFFSET_PLUS_SIZE, MAX_TARGET_LEN, Op, PROTOCOL, ParamError, SessionId, format_hex_u32, format_psn,
    parse_cookie, parse_mr_addr, parse_mr_rkey, parse_offset, parse_op, parse_protocol, parse_psn, parse_qpn,
    parse_size, parse_target,
};
pub use principal::PrincipalId;
pub use token::{
    ClientToken, RdmaToken, TOKEN_HEX_LEN, TOKEN_LEN, TokenError, TokenSuffix, Transport as TokenTransport,
};

//! Whole `x-amz-rdma-*` header sets of PREPARE, READY and CANCEL: every
//! field found (case-insensitively, as HTTP names are), present once,
//! and parsed by the rules of docs/protocols.md §3.3. The gateway builds its
//! session requests from these; the `hipobj_headers` fuzz target feeds them
//! arbitrary header lists.

use thiserror::Error;

use super::{
    ChecksumError, ClientToken, Crc64Nvme, MAX_OFFSET_PLUS_SIZE, Op, PROTOCOL, ParamError, SessionId, TokenError,
    parse_cookie, parse_mr_addr, parse_mr_rkey, parse_offset, parse_op, parse_protocol, parse_psn, parse_qpn,
    parse_size, parse_target,
};

/// The prefix of every parameter header.
pub const HEADER_PREFIX: &str = "x-amz-rdma-";

/// Why a header set is refused (all ARG, or TRUNC for a long target).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// A required header is absent.
    #[error("x-amz-rdma-{field}: missing")]
    Missing {
        /// The field name, without the `x-amz-rdma-` prefix.
        field: &'static str,
    },
    /// A header, required or optional, appears more than once (under any
    /// capitalisation of its name).
    #[error("x-amz-rdma-{field}: given more than once")]
    Repeated {
        /// The field name, without the `x-amz-rdma-` prefix.
        field: &'static str,
    },
    /// PREPARE's `offset` + `size` exceeds [`MAX_OFFSET_PLUS_SIZE`].
    #[error("x-amz-rdma-offset: offset + size must be at most {MAX_OFFSET_PLUS_SIZE}")]
    Range,
    /// A value breaks its parameter's rule (ARG, or TRUNC for a target over
    /// 2047 bytes).
    #[error(transparent)]
    Param(#[from] ParamError),
    /// PREPARE's non-empty `token` does not parse as a [`ClientToken`].
    #[error(transparent)]
    Token(#[from] TokenError),
    /// PREPARE's `checksum` is not a valid [`Crc64Nvme`] header value.
    #[error(transparent)]
    Checksum(#[from] ChecksumError),
}

/// PREPARE's parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareHeaders {
    /// `op`: GET or PUT, in any case.
    pub op: Op,
    /// `target` as sent: `/bucket/key[?query]` with percent-encoded segments, at
    /// most 2047 bytes; the query is left to the gateway.
    pub target: String,
    /// `size`: bytes to transfer, 1..=0x7FFFFFFF.
    pub size: u64,
    /// `offset`: where the transfer starts in the object; `offset + size` is at
    /// most [`MAX_OFFSET_PLUS_SIZE`].
    pub offset: u64,
    /// `psn`: the client's starting PSN, 1..=0xFFFFFF.
    pub psn: u32,
    /// `cookie`: non-zero 32-bit value that READY must repeat and the data
    /// phase carries as the immediate.
    pub cookie: u32,
    /// The token as sent (validated); `None` when absent or empty.
    pub token: Option<String>,
    /// `checksum`: the CRC-64/NVME the object must have, when sent.
    pub checksum: Option<Crc64Nvme>,
}

/// READY's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadyHeaders {
    /// `session`: the id PREPARE returned.
    pub session: SessionId,
    /// `cookie`: the cookie given to PREPARE (the session server compares them).
    pub cookie: u32,
    /// `qpn`: the client's RC QP number, 24 bits; 0 parses here (see
    /// [`parse_qpn`](super::parse_qpn)).
    pub qpn: u32,
    /// `mr-addr`: address of the client's memory region (bare hex, 64 bits).
    pub mr_addr: u64,
    /// `mr-rkey`: rkey of the client's memory region (bare hex, 32 bits).
    pub mr_rkey: u32,
}

/// CANCEL's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelHeaders {
    /// `session`: the id of the session to cancel.
    pub session: SessionId,
}

/// The `x-amz-rdma-*` fields of one request.
struct Fields<'a> {
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn new(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Fields { pairs: headers.into_iter().collect() }
    }

    fn get(&self, field: &'static str) -> Result<Option<&'a str>, HeaderError> {
        // Compared as bytes: a name may hold any UTF-8, and slicing it as a
        // str at the prefix length could split a character.
        let (prefix, field_bytes) = (HEADER_PREFIX.as_bytes(), field.as_bytes());
        let mut found = self.pairs.iter().filter(|(name, _)| {
            let name = name.as_bytes();
            name.len() == prefix.len() + field_bytes.len()
                && name[..prefix.len()].eq_ignore_ascii_case(prefix)
                && name[prefix.len()..].eq_ignore_ascii_case(field_bytes)
        });
        let first = found.next().map(|(_, v)| *v);
        if found.next().is_some() {
            return Err(HeaderError::Repeated { field });
        }
        Ok(first)
    }

    fn required(&self, field: &'static str) -> Result<&'a str, HeaderError> {
        self.get(field)?.ok_or(HeaderError::Missing { field })
    }

    fn protocol(&self) -> Result<(), HeaderError> {
        Ok(parse_protocol(self.required("protocol")?)?)
    }
}

impl PrepareHeaders {
    /// Parses PREPARE's header set (other headers are ignored).
    pub fn parse<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, HeaderError> {
        let f = Fields::new(headers);
        f.protocol()?;
        let op = parse_op(f.required("op")?)?;
        let target = parse_target(f.required("target")?)?.to_string();
        let size = parse_size(f.required("size")?)?;
        let offset = parse_offset(f.required("offset")?)?;
        if offset > MAX_OFFSET_PLUS_SIZE.saturating_sub(size) {
            return Err(HeaderError::Range);
        }
        let psn = parse_psn(f.required("psn")?)?;
        let cookie = parse_cookie(f.required("cookie")?)?;
        let token = match f.get("token")? {
            None | Some("") => None,
            Some(t) => {
                ClientToken::parse(t)?;
                Some(t.to_string())
            }
        };
        let checksum = f.get("checksum")?.map(Crc64Nvme::parse).transpose()?;
        Ok(PrepareHeaders { op, target, size, offset, psn, cookie, token, checksum })
    }

    /// The header set a client sends (canonical spellings).
    pub fn to_headers(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("x-amz-rdma-protocol".to_string(), PROTOCOL.to_string()),
            ("x-amz-rdma-op".into(), self.op.name().to_string()),
            ("x-amz-rdma-target".into(), self.target.clone()),
            ("x-amz-rdma-size".into(), self.size.to_string()),
            ("x-amz-rdma-offset".into(), self.offset.to_string()),
            ("x-amz-rdma-psn".into(), format!("{:x}", self.psn)),
            ("x-amz-rdma-cookie".into(), format!("{:x}", self.cookie)),
        ];
        if let Some(t) = &self.token {
            out.push(("x-amz-rdma-token".into(), t.clone()));
        }
        if let Some(c) = self.checksum {
            out.push(("x-amz-rdma-checksum".into(), c.to_header()));
        }
        out
    }
}

impl ReadyHeaders {
    /// Parses READY's header set. A malformed session id is an ARG here;
    /// the gateway answers it as NO_SESSION, like an unknown id.
    pub fn parse<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, HeaderError> {
        let f = Fields::new(headers);
        f.protocol()?;
        Ok(ReadyHeaders {
            session: SessionId::parse(f.required("session")?)?,
            cookie: parse_cookie(f.required("cookie")?)?,
            qpn: parse_qpn(f.required("qpn")?)?,
            mr_addr: parse_mr_addr(f.required("mr-addr")?)?,
            mr_rkey: parse_mr_rkey(f.required("mr-rkey")?)?,
        })
    }

    /// The header set a client sends.
    pub fn to_headers(&self) -> Vec<(String, String)> {
        vec![
            ("x-amz-rdma-protocol".to_string(), PROTOCOL.to_string()),
            ("x-amz-rdma-session".into(), self.session.to_string()),
            ("x-amz-rdma-cookie".into(), format!("{:x}", self.cookie)),
            ("x-amz-rdma-qpn".into(), format!("{:x}", self.qpn)),
            ("x-amz-rdma-mr-addr".into(), format!("{:x}", self.mr_addr)),
            ("x-amz-rdma-mr-rkey".into(), format!("{:x}", self.mr_rkey)),
        ]
    }
}

impl CancelHeaders {
    /// Parses CANCEL's header set.
    pub fn parse<'a>(headers: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, HeaderError> {
        let f = Fields::new(headers);
        f.protocol()?;
        Ok(CancelHeaders { session: SessionId::parse(f.required("session")?)? })
    }

    /// The header set a client sends.
    pub fn to_headers(&self) -> Vec<(String, String)> {
        vec![
            ("x-amz-rdma-protocol".to_string(), PROTOCOL.to_string()),
            ("x-amz-rdma-session".into(), self.session.to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare() -> Vec<(&'static str, &'static str)> {
        vec![
            ("X-Amz-Rdma-Protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-op", "put"),
            ("x-amz-rdma-target", "/bucket/a%20b"),
            ("x-amz-rdma-size", "4096"),
            ("x-amz-rdma-offset", "0"),
            ("x-amz-rdma-psn", "abcdef"),
            ("x-amz-rdma-cookie", "DEADBEEF"),
            ("host", "example"),
        ]
    }

    #[test]
    fn a_prepare_set_parses_and_round_trips() {
        let p = PrepareHeaders::parse(prepare()).expect("parses");
        assert_eq!((p.op, p.size, p.offset, p.psn, p.cookie), (Op::Put, 4096, 0, 0xabcdef, 0xdead_beef));
        assert_eq!(p.target, "/bucket/a%20b");
        let h = p.to_headers();
        let again = PrepareHeaders::parse(h.iter().map(|(k, v)| (k.as_str(), v.as_str()))).expect("re-parses");
        assert_eq!(again, p);
    }

    #[test]
    fn each_class_of_bad_set_names_its_field() {
        let with = |name: &'static str, value: &'static str| {
            let mut h = prepare();
            h.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
            h.push((name, value));
            PrepareHeaders::parse(h)
        };
        let mut missing = prepare();
        missing.retain(|(k, _)| *k != "x-amz-rdma-cookie");
        assert_eq!(PrepareHeaders::parse(missing), Err(HeaderError::Missing { field: "cookie" }));
        let mut twice = prepare();
        twice.push(("X-AMZ-RDMA-SIZE", "1"));
        assert_eq!(PrepareHeaders::parse(twice), Err(HeaderError::Repeated { field: "size" }));
        assert!(matches!(with("x-amz-rdma-cookie", "0"), Err(HeaderError::Param(_))));
        assert!(matches!(with("x-amz-rdma-cookie", "xyz"), Err(HeaderError::Param(_))));
        assert!(matches!(with("x-amz-rdma-psn", "1000000"), Err(HeaderError::Param(_))));
        assert!(matches!(with("x-amz-rdma-target", "/bucket/a b"), Err(HeaderError::Param(_))));
        assert!(matches!(with("x-amz-rdma-protocol", "hipobj-rc-v1"), Err(HeaderError::Param(_))));
        assert!(matches!(with("x-amz-rdma-token", "12"), Err(HeaderError::Token(_))));
        assert!(matches!(with("x-amz-rdma-checksum", "CRC64NVME AAAA"), Err(HeaderError::Checksum(_))));
        assert_eq!(with("x-amz-rdma-offset", "2147483000"), Err(HeaderError::Range));
        let long: &'static str = Box::leak(format!("/b/{}", "k".repeat(2100)).into_boxed_str());
        assert!(matches!(with("x-amz-rdma-target", long), Err(HeaderError::Param(ParamError::TooLong { .. }))));
    }

    #[test]
    fn ready_and_cancel_sets() {
        let id = "0123456789abcdef0123456789abcdef";
        let ready = [
            ("x-amz-rdma-protocol", "hipobj-rc-v2"),
            ("x-amz-rdma-session", id),
            ("x-amz-rdma-cookie", "2a"),
            ("x-amz-rdma-qpn", "11"),
            ("x-amz-rdma-mr-addr", "7f0000001000"),
            ("x-amz-rdma-mr-rkey", "55"),
        ];
        let r = ReadyHeaders::parse(ready).expect("parses");
        assert_eq!((r.cookie, r.qpn, r.mr_addr, r.mr_rkey), (0x2a, 0x11, 0x7f00_0000_1000, 0x55));
        let h = r.to_headers();
        assert_eq!(ReadyHeaders::parse(h.iter().map(|(k, v)| (k.as_str(), v.as_str()))), Ok(r));
        assert_eq!(
            ReadyHeaders::parse(ready.iter().copied().filter(|(k, _)| *k != "x-amz-rdma-qpn")),
            Err(HeaderError::Missing { field: "qpn" })
        );
        let c = CancelHeaders::parse([("x-amz-rdma-protocol", "hipobj-rc-v2"), ("x-amz-rdma-session", id)]);
        assert_eq!(c.map(|c| c.session.to_string()), Ok(id.to_string()));
    }
}

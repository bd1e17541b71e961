//! Fabrics Connect: its 1024-byte data, NQNs, and the response's DW0.

use std::fmt;

use super::{CONNECT_DATA_LEN, ProtocolError, need, put_text, put_u16, text_at, u16_at};

/// Controller id (CNTLID) 0xFFFF in the connect data of an admin queue:
/// the host asks the subsystem for any dynamically allocated controller.
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;

/// An NVMe Qualified Name: 11..=223 UTF-8 bytes, no NUL.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nqn(String);

impl Nqn {
    /// Checks `s`: fewer than 11 or more than 223 bytes is
    /// [`ProtocolError::Field`] (`Nqn.length`), an embedded NUL is
    /// [`ProtocolError::Text`]. The `nqn.` prefix and form are not checked.
    pub fn new(s: impl Into<String>) -> Result<Self, ProtocolError> {
        let s = s.into();
        if s.len() < 11 || s.len() > 223 {
            return Err(ProtocolError::field("Nqn", "length", s.len() as u64, "an NQN is 11..=223 bytes"));
        }
        if s.contains('\0') {
            return Err(ProtocolError::Text { what: "Nqn", field: "text", rule: "must not contain NUL" });
        }
        Ok(Nqn(s))
    }

    /// The host NQN derived from a host id, as nvme-cli does:
    /// `nqn.2014-08.org.nvmexpress:uuid:` followed by [`uuid_text`] of it.
    pub fn from_host_id(host_id: &[u8; 16]) -> Nqn {
        Nqn(format!("nqn.2014-08.org.nvmexpress:uuid:{}", uuid_text(host_id)))
    }

    /// The NQN's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Nqn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` of 16 bytes: lowercase hex, in
/// byte order.
pub fn uuid_text(b: &[u8; 16]) -> String {
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// Fabrics Connect data: the 1024 bytes a Connect command's SGL points to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// Host Identifier (HOSTID, bytes 0..16), a 128-bit UUID naming the host
    /// (see [`Nqn::from_host_id`]).
    pub host_id: [u8; 16],
    /// Controller ID (CNTLID, bytes 16..18): 0xFFFF on the admin queue
    /// (dynamic); the controller id on I/O queues.
    pub cntlid: u16,
    /// NVM Subsystem NVMe Qualified Name (SUBNQN, bytes 256..512,
    /// NUL-padded).
    pub subnqn: Nqn,
    /// Host NVMe Qualified Name (HOSTNQN, bytes 512..768, NUL-padded).
    pub hostnqn: Nqn,
}

impl ConnectData {
    /// The 1024 bytes; reserved bytes are zero.
    pub fn encode(&self) -> [u8; CONNECT_DATA_LEN] {
        let mut b = [0u8; CONNECT_DATA_LEN];
        b[..16].copy_from_slice(&self.host_id);
        put_u16(&mut b, 16, self.cntlid);
        put_text(&mut b, 256..512, self.subnqn.as_str(), 0);
        put_text(&mut b, 512..768, self.hostnqn.as_str(), 0);
        b
    }

    /// Decodes the first 1024 bytes; fewer is [`ProtocolError::Short`]. Each
    /// NQN is read up to its first NUL, trailing whitespace dropped, and
    /// must pass [`Nqn::new`]; a bad length is reported as
    /// [`ProtocolError::Field`] on `ConnectData.subnqn` or
    /// `ConnectData.hostnqn`.
    pub fn decode(b: &[u8]) -> Result<Self, ProtocolError> {
        need("ConnectData", b, CONNECT_DATA_LEN)?;
        let nqn = |range: std::ops::Range<usize>, field| {
            Nqn::new(text_at(b, range)).map_err(|e| match e {
                ProtocolError::Field { value, rule, .. } => {
                    ProtocolError::Field { what: "ConnectData", field, value, rule }
                }
                other => other,
            })
        };
        Ok(ConnectData {
            host_id: b[..16].try_into().expect("16 bytes"),
            cntlid: u16_at(b, 16),
            subnqn: nqn(256..512, "subnqn")?,
            hostnqn: nqn(512..768, "hostnqn")?,
        })
    }
}

/// DW0 of a successful Connect response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectResult {
    /// Controller ID (bits 15:0) the target assigned; I/O queues carry it
    /// in their connect data and CM request.
    pub cntlid: u16,
    /// Authentication required (AUTHREQ bits 17 and 18).
    pub auth_required: bool,
}

impl ConnectResult {
    /// Splits DW0 into the controller id and the AUTHREQ flags (any of bits
    /// 17 and 18 set).
    pub fn from_dw0(dw0: u32) -> Self {
        ConnectResult { cntlid: dw0 as u16, auth_required: dw0 & (0b11 << 17) != 0 }
    }
}

/// Where a Connect's invalid parameter is, from the DW0 of an
/// "invalid parameters" response (IATTR bit 16, IPO bits 15:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InvalidParameter {
    /// The parameter is in the connect data (else in the command).
    pub in_data: bool,
    /// Invalid Parameter Offset (IPO): byte offset of the parameter in the
    /// connect data or in the 64-byte command.
    pub offset: u16,
}

impl InvalidParameter {
    /// Reads IPO from bits 15:0; any bit of 31:16 set counts as IATTR
    /// "in the connect data".
    pub fn from_dw0(dw0: u32) -> Self {
        InvalidParameter { in_data: dw0 >> 16 != 0, offset: dw0 as u16 }
    }

    /// DW0 naming byte `offset` of the connect data.
    pub fn data_dw0(offset: u16) -> u32 {
        1 << 16 | offset as u32
    }

    /// The parameter's name: host id, controller id and the two NQNs in
    /// the data, QID, SQSIZE and KATO in the command, else
    /// `"unknown parameter"`.
    pub fn name(&self) -> &'static str {
        match (self.in_data, self.offset) {
            (true, 0) => "host id",
            (true, 16) => "controller id",
            (true, 256) => "subsystem NQN",
            (true, 512) => "host NQN",
            (false, 42) => "queue id",
            (false, 44) => "submission queue size",
            (false, 48) => "keep alive timeout",
            _ => "unknown parameter",
        }
    }
}

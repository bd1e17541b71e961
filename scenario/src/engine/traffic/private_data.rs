//! The RDMA CM private data a stream exchanges: the requester's hello names
//! the stream, the responder's answer describes the region it exposes for
//! WRITE and READ. This is how real RDMA applications hand over an rkey.

use rctb_core::transport::RemoteAddr;

const MAGIC: &[u8; 4] = b"RCTB";
const VERSION: u8 = 1;

/// REQ private data: which stream is connecting (14 bytes, under the 56 allowed).
pub fn hello(stream_key: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(14);
    v.extend_from_slice(MAGIC);
    v.push(VERSION);
    v.push(0);
    v.extend_from_slice(&stream_key.to_be_bytes());
    v
}

/// The stream key of a hello, if it is one of ours.
pub fn parse_hello(data: &[u8]) -> Option<u64> {
    if data.len() < 14 || &data[..4] != MAGIC || data[4] != VERSION {
        return None;
    }
    Some(u64::from_be_bytes(data[6..14].try_into().ok()?))
}

/// REP private data: the responder's region (address, rkey, length).
pub fn region(remote: RemoteAddr, len: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(25);
    v.extend_from_slice(MAGIC);
    v.push(VERSION);
    v.extend_from_slice(&remote.addr.to_be_bytes());
    v.extend_from_slice(&remote.rkey.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

pub fn parse_region(data: &[u8]) -> Option<(RemoteAddr, u64)> {
    if data.len() < 25 || &data[..4] != MAGIC || data[4] != VERSION {
        return None;
    }
    let addr = u64::from_be_bytes(data[5..13].try_into().ok()?);
    let rkey = u32::from_be_bytes(data[13..17].try_into().ok()?);
    let len = u64::from_be_bytes(data[17..25].try_into().ok()?);
    Some((RemoteAddr { addr, rkey }, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_foreign_data() {
        assert_eq!(parse_hello(&hello(0xDEAD_BEEF_0102)), Some(0xDEAD_BEEF_0102));
        assert_eq!(parse_hello(b"NVMEsomething-else"), None);
        let r = RemoteAddr { addr: 0x7f00_0000_1000, rkey: 0x1234_5678 };
        assert_eq!(parse_region(&region(r, 4096)), Some((r, 4096)));
        assert_eq!(parse_region(&region(r, 4096)[..24]), None, "truncated");
    }
}

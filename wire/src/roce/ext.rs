//! The extended transport headers that follow the BTH: the atomic headers'
//! layouts and [`ExtHeaders`], the set an opcode carries, in wire order.

use super::codec::{IETH_LEN, array_at, fixed_header, put_at, split_ieth, split_immdt};
use super::error::RoceError;
use super::headers::{AETH_LEN, Aeth, DETH_LEN, Deth, IMMDT_LEN, Opcode, RETH_LEN, Reth};

/// Length of the AtomicETH of CmpSwap / FetchAdd requests.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the AtomicAckETH of an Atomic Acknowledge.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// Atomic Extended Transport Header (28 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicEth {
    /// Virtual address (bytes 0..8) of the 8-byte remote operand.
    pub va: u64,
    /// R_Key (bytes 8..12) of the remote memory region.
    pub rkey: u32,
    /// Swap data (CmpSwap) or add data (FetchAdd).
    pub swap_add: u64,
    /// Compare data (CmpSwap only; carried but unused by FetchAdd).
    pub compare: u64,
}

impl AtomicEth {
    /// Reads the 28 AtomicETH bytes (swap/add data at 12, compare data at 20);
    /// never fails.
    pub fn from_bytes(b: &[u8; ATOMIC_ETH_LEN]) -> AtomicEth {
        AtomicEth {
            va: u64::from_be_bytes(array_at(b, 0)),
            rkey: u32::from_be_bytes(array_at(b, 8)),
            swap_add: u64::from_be_bytes(array_at(b, 12)),
            compare: u64::from_be_bytes(array_at(b, 20)),
        }
    }

    /// The 28 wire bytes.
    pub fn to_bytes(&self) -> [u8; ATOMIC_ETH_LEN] {
        let mut b = [0u8; ATOMIC_ETH_LEN];
        put_at(&mut b, 0, &self.va.to_be_bytes());
        put_at(&mut b, 8, &self.rkey.to_be_bytes());
        put_at(&mut b, 12, &self.swap_add.to_be_bytes());
        put_at(&mut b, 20, &self.compare.to_be_bytes());
        b
    }
}

/// Atomic Acknowledge Extended Transport Header (8 bytes): the original
/// remote data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AtomicAckEth {
    /// Original remote data: the 8 bytes at the target address before the atomic
    /// ran.
    pub orig: u64,
}

impl AtomicAckEth {
    /// Reads the 8 AtomicAckETH bytes; never fails.
    pub fn from_bytes(b: &[u8; ATOMIC_ACK_ETH_LEN]) -> AtomicAckEth {
        AtomicAckEth { orig: u64::from_be_bytes(*b) }
    }

    /// The 8 wire bytes.
    pub fn to_bytes(&self) -> [u8; ATOMIC_ACK_ETH_LEN] {
        self.orig.to_be_bytes()
    }
}

fixed_header!(AtomicEth, ATOMIC_ETH_LEN, "AtomicETH");
fixed_header!(AtomicAckEth, ATOMIC_ACK_ETH_LEN, "AtomicAckETH");

/// The extended headers between the BTH and the payload.
///
/// Which ones are present is fixed by the opcode ([`Opcode::has_reth`] and
/// friends); decoding follows the opcode, and encoders check the set against
/// it with [`ExtHeaders::check`] so a built frame always decodes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ExtHeaders {
    /// DETH, carried by every UD opcode.
    pub deth: Option<Deth>,
    /// RETH, carried by RDMA WRITE First/Only and READ Request.
    pub reth: Option<Reth>,
    /// AtomicETH, carried by CmpSwap and FetchAdd.
    pub atomic: Option<AtomicEth>,
    /// AETH, carried by READ Response First/Last/Only, Acknowledge and Atomic
    /// Acknowledge.
    pub aeth: Option<Aeth>,
    /// AtomicAckETH, carried by Atomic Acknowledge after its AETH.
    pub atomic_ack: Option<AtomicAckEth>,
    /// ImmDt: the immediate as the network-order u32 on the wire.
    pub imm: Option<u32>,
    /// IETH: the rkey to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// No extended headers (SEND First/Middle/Last/Only, WRITE Middle/Last, ...).
    pub const NONE: ExtHeaders =
        ExtHeaders { deth: None, reth: None, atomic: None, aeth: None, atomic_ack: None, imm: None, ieth: None };

    /// Decodes the headers `opcode` carries from the start of `bytes`; returns
    /// them and the bytes after them. The opcode must be known.
    pub fn split(opcode: Opcode, bytes: &[u8]) -> Result<(ExtHeaders, &[u8]), RoceError> {
        if !opcode.is_known() {
            return Err(RoceError::UnknownOpcode(opcode));
        }
        let mut ext = ExtHeaders::NONE;
        let mut rest = bytes;
        // IBA 9.2: DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH.
        if opcode.has_deth() {
            let (h, r) = Deth::split(rest)?;
            (ext.deth, rest) = (Some(h), r);
        }
        if opcode.has_reth() {
            let (h, r) = Reth::split(rest)?;
            (ext.reth, rest) = (Some(h), r);
        }
        if opcode.has_atomic_eth() {
            let (h, r) = AtomicEth::split(rest)?;
            (ext.atomic, rest) = (Some(h), r);
        }
        if opcode.has_aeth() {
            let (h, r) = Aeth::split(rest)?;
            (ext.aeth, rest) = (Some(h), r);
        }
        if opcode.has_atomic_ack_eth() {
            let (h, r) = AtomicAckEth::split(rest)?;
            (ext.atomic_ack, rest) = (Some(h), r);
        }
        if opcode.has_immdt() {
            let (h, r) = split_immdt(rest)?;
            (ext.imm, rest) = (Some(h), r);
        }
        if opcode.has_ieth() {
            let (h, r) = split_ieth(rest)?;
            (ext.ieth, rest) = (Some(h), r);
        }
        Ok((ext, rest))
    }

    /// Checks that exactly the headers `opcode` carries are present.
    pub fn check(&self, opcode: Opcode) -> Result<(), RoceError> {
        if !opcode.is_known() {
            return Err(RoceError::UnknownOpcode(opcode));
        }
        let presence = [
            (Deth::NAME, self.deth.is_some(), opcode.has_deth()),
            (Reth::NAME, self.reth.is_some(), opcode.has_reth()),
            (AtomicEth::NAME, self.atomic.is_some(), opcode.has_atomic_eth()),
            (Aeth::NAME, self.aeth.is_some(), opcode.has_aeth()),
            (AtomicAckEth::NAME, self.atomic_ack.is_some(), opcode.has_atomic_ack_eth()),
            ("ImmDt", self.imm.is_some(), opcode.has_immdt()),
            ("IETH", self.ieth.is_some(), opcode.has_ieth()),
        ];
        match presence.into_iter().find(|(_, present, required)| present != required) {
            Some((header, _, required)) => Err(RoceError::ExtMismatch { opcode, header, required }),
            None => Ok(()),
        }
    }

    /// Encoded length of the present headers.
    pub fn wire_len(&self) -> usize {
        let present = |p: bool, len: usize| if p { len } else { 0 };
        present(self.deth.is_some(), DETH_LEN)
            + present(self.reth.is_some(), RETH_LEN)
            + present(self.atomic.is_some(), ATOMIC_ETH_LEN)
            + present(self.aeth.is_some(), AETH_LEN)
            + present(self.atomic_ack.is_some(), ATOMIC_ACK_ETH_LEN)
            + present(self.imm.is_some(), IMMDT_LEN)
            + present(self.ieth.is_some(), IETH_LEN)
    }

    /// Appends the present headers in wire order.
    pub fn encode(&self, out: &mut Vec<u8>) {
        self.for_each_encoded(|bytes| out.extend_from_slice(bytes));
    }

    /// Hands each present header's bytes to `f` in wire order. The one place
    /// that knows the order, shared by the encoder and the ICRC, which must
    /// not allocate.
    pub(crate) fn for_each_encoded(&self, mut f: impl FnMut(&[u8])) {
        if let Some(h) = &self.deth {
            f(&h.to_bytes());
        }
        if let Some(h) = &self.reth {
            f(&h.to_bytes());
        }
        if let Some(h) = &self.atomic {
            f(&h.to_bytes());
        }
        if let Some(h) = &self.aeth {
            f(&h.to_bytes());
        }
        if let Some(h) = &self.atomic_ack {
            f(&h.to_bytes());
        }
        // ImmDt and IETH are both one network-order word.
        for word in [self.imm, self.ieth].into_iter().flatten() {
            f(&word.to_be_bytes());
        }
    }
}

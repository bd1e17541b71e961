//! InfiniBand transport headers as RoCEv2 carries them: BTH, RETH, AETH, DETH,
//! ImmDt. Field layouts per IBTA Vol 1 chapter 9; all fields in network order.

use std::fmt;

use crate::transport::Psn;

/// UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const DETH_LEN: usize = 8;
pub const IMMDT_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;
/// The P_Key every rctb QP uses (pkey index 0 on rxe and mlx5 defaults).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// A BTH opcode: transport class in bits 7:5, operation in bits 4:0.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    pub const SEND_FIRST: Opcode = Opcode(0x00);
    pub const SEND_MIDDLE: Opcode = Opcode(0x01);
    pub const SEND_LAST: Opcode = Opcode(0x02);
    pub const SEND_LAST_IMM: Opcode = Opcode(0x03);
    pub const SEND_ONLY: Opcode = Opcode(0x04);
    pub const SEND_ONLY_IMM: Opcode = Opcode(0x05);
    pub const WRITE_FIRST: Opcode = Opcode(0x06);
    pub const WRITE_MIDDLE: Opcode = Opcode(0x07);
    pub const WRITE_LAST: Opcode = Opcode(0x08);
    pub const WRITE_LAST_IMM: Opcode = Opcode(0x09);
    pub const WRITE_ONLY: Opcode = Opcode(0x0A);
    pub const WRITE_ONLY_IMM: Opcode = Opcode(0x0B);
    pub const READ_REQUEST: Opcode = Opcode(0x0C);
    pub const READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    pub const READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    pub const READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    pub const READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    pub const ACKNOWLEDGE: Opcode = Opcode(0x11);
    pub const ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    pub const COMPARE_SWAP: Opcode = Opcode(0x13);
    pub const FETCH_ADD: Opcode = Opcode(0x14);
    pub const SEND_LAST_INV: Opcode = Opcode(0x16);
    pub const SEND_ONLY_INV: Opcode = Opcode(0x17);
    /// UD SEND Only (CM MADs on QP1).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    pub const UD_SEND_ONLY_IMM: Opcode = Opcode(0x65);

    /// Transport class: 0 RC, 1 UC, 2 RD, 3 UD, 4 CNP, 5 XRC.
    pub const fn class(self) -> u8 {
        self.0 >> 5
    }

    /// The operation within the class (bits 4:0).
    pub const fn op(self) -> u8 {
        self.0 & 0x1F
    }

    /// Whether rctb knows this opcode's header layout.
    pub const fn is_known(self) -> bool {
        match self.class() {
            0 => matches!(self.op(), 0x00..=0x14 | 0x16 | 0x17),
            3 => matches!(self.op(), 0x04 | 0x05),
            _ => false,
        }
    }

    pub const fn is_rc(self) -> bool {
        self.class() == 0
    }

    pub const fn is_ud(self) -> bool {
        self.class() == 3
    }

    pub const fn has_reth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x06 | 0x0A | 0x0B | 0x0C)
    }

    pub const fn has_aeth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x0D | 0x0F | 0x10 | 0x11 | 0x12)
    }

    pub const fn has_immdt(self) -> bool {
        (self.is_rc() && matches!(self.op(), 0x03 | 0x05 | 0x09 | 0x0B)) || (self.is_ud() && self.op() == 0x05)
    }

    /// SEND Last/Only with Invalidate carry an IETH (4 bytes, the rkey).
    pub const fn has_ieth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x16 | 0x17)
    }

    pub const fn has_deth(self) -> bool {
        self.is_ud()
    }

    /// Atomic requests carry an AtomicETH (28 bytes).
    pub const fn has_atomic_eth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x13 | 0x14)
    }

    /// Atomic acknowledge carries an AtomicAckETH (8 bytes) after the AETH.
    pub const fn has_atomic_ack_eth(self) -> bool {
        self.is_rc() && self.op() == 0x12
    }

    pub const fn is_send(self) -> bool {
        (self.is_rc() && matches!(self.op(), 0x00..=0x05 | 0x16 | 0x17)) || self.is_ud()
    }

    pub const fn is_write(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x06..=0x0B)
    }

    pub const fn is_read_response(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x0D..=0x10)
    }

    /// First packet of a multi-packet message.
    pub const fn is_first(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x00 | 0x06 | 0x0D)
    }

    pub const fn is_middle(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x01 | 0x07 | 0x0E)
    }

    pub const fn is_last(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x02 | 0x03 | 0x08 | 0x09 | 0x0F | 0x16)
    }

    pub const fn is_only(self) -> bool {
        (self.is_rc() && matches!(self.op(), 0x04 | 0x05 | 0x0A | 0x0B | 0x10 | 0x17)) || self.is_ud()
    }

    /// Whether this packet starts a message (First or Only).
    pub const fn starts_message(self) -> bool {
        self.is_first() || self.is_only()
    }

    /// Whether this packet ends a message (Last or Only).
    pub const fn ends_message(self) -> bool {
        self.is_last() || self.is_only()
    }

    /// The name Wireshark uses, e.g. "RC Send Only".
    pub fn name(self) -> &'static str {
        match self.0 {
            0x00 => "RC Send First",
            0x01 => "RC Send Middle",
            0x02 => "RC Send Last",
            0x03 => "RC Send Last Immediate",
            0x04 => "RC Send Only",
            0x05 => "RC Send Only Immediate",
            0x06 => "RC RDMA Write First",
            0x07 => "RC RDMA Write Middle",
            0x08 => "RC RDMA Write Last",
            0x09 => "RC RDMA Write Last Immediate",
            0x0A => "RC RDMA Write Only",
            0x0B => "RC RDMA Write Only Immediate",
            0x0C => "RC RDMA Read Request",
            0x0D => "RC RDMA Read Response First",
            0x0E => "RC RDMA Read Response Middle",
            0x0F => "RC RDMA Read Response Last",
            0x10 => "RC RDMA Read Response Only",
            0x11 => "RC Acknowledge",
            0x12 => "RC Atomic Acknowledge",
            0x13 => "RC Compare Swap",
            0x14 => "RC Fetch Add",
            0x16 => "RC Send Last Invalidate",
            0x17 => "RC Send Only Invalidate",
            0x64 => "UD Send Only",
            0x65 => "UD Send Only Immediate",
            _ => "Unknown",
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Opcode({:#04x} {})", self.0, self.name())
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Base Transport Header (12 bytes).
///
/// Reserved fields are kept as read so that a decoded header re-encodes byte
/// for byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Bth {
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    pub mig_req: bool,
    /// Pad count: payload bytes added to reach a multiple of 4 (0..=3).
    pub pad: u8,
    /// Transport header version (4 bits, 0).
    pub tver: u8,
    pub pkey: u16,
    /// Byte 4: FECN bit 7, BECN bit 6, reserved 5:0 (RoCEv2 "resv8a").
    pub resv8a: u8,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    pub ack_req: bool,
    /// Bits 6:0 of byte 8 (reserved).
    pub resv7: u8,
    pub psn: Psn,
}

impl Bth {
    /// A BTH with the defaults rxe sends: pkey 0xFFFF, tver 0, no MigReq.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Self {
        Bth {
            opcode,
            se: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            resv8a: 0,
            dest_qp: dest_qp & 0x00FF_FFFF,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    pub fn fecn(&self) -> bool {
        self.resv8a & 0x80 != 0
    }

    pub fn becn(&self) -> bool {
        self.resv8a & 0x40 != 0
    }
}

/// RDMA Extended Transport Header (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

/// ACK Extended Transport Header (4 bytes): syndrome and MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aeth {
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// NAK codes of AETH syndromes 0x60..=0x7F.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// A reserved code (the low 5 bits).
    Reserved(u8),
}

impl NakCode {
    pub fn from_low_bits(code: u8) -> Self {
        match code & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            other => NakCode::Reserved(other),
        }
    }

    pub fn low_bits(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(c) => c & 0x1F,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "PSN sequence error",
            NakCode::InvalidRequest => "invalid request",
            NakCode::RemoteAccessError => "remote access error",
            NakCode::RemoteOperationalError => "remote operational error",
            NakCode::InvalidRdRequest => "invalid RD request",
            NakCode::Reserved(_) => "reserved NAK code",
        }
    }
}

/// What an AETH syndrome means (bits 6:5 select the kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// ACK with a credit count (low 5 bits; 0x1F = invalid/unlimited).
    Ack {
        credits: u8,
    },
    /// RNR NAK with a min RNR timer code (IBA table 45).
    RnrNak {
        timer: u8,
    },
    /// Syndrome 0x40..=0x5F is reserved.
    Reserved,
    Nak(NakCode),
}

impl fmt::Display for AckKind {
    /// "ACK", "RNR NAK timer N" or "NAK CODE".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AckKind::Ack { .. } => f.write_str("ACK"),
            AckKind::RnrNak { timer } => write!(f, "RNR NAK timer {timer}"),
            AckKind::Nak(code) => write!(f, "NAK {}", code.name()),
            AckKind::Reserved => f.write_str("reserved"),
        }
    }
}

impl Aeth {
    pub fn ack(msn: u32) -> Self {
        // rxe sends credit code 0x1F ("invalid": credits not used).
        Aeth { syndrome: 0x1F, msn: msn & 0x00FF_FFFF }
    }

    pub fn rnr_nak(timer_code: u8, msn: u32) -> Self {
        Aeth { syndrome: 0x20 | (timer_code & 0x1F), msn: msn & 0x00FF_FFFF }
    }

    pub fn nak(code: NakCode, msn: u32) -> Self {
        Aeth { syndrome: 0x60 | code.low_bits(), msn: msn & 0x00FF_FFFF }
    }

    pub fn kind(&self) -> AckKind {
        let low = self.syndrome & 0x1F;
        match (self.syndrome >> 5) & 0x3 {
            0 => AckKind::Ack { credits: low },
            1 => AckKind::RnrNak { timer: low },
            2 => AckKind::Reserved,
            _ => AckKind::Nak(NakCode::from_low_bits(low)),
        }
    }
}

/// Datagram Extended Transport Header (8 bytes), carried by UD packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Deth {
    pub qkey: u32,
    /// Source QP (24 bits) with the reserved byte before it kept as read.
    pub resv8: u8,
    pub src_qp: u32,
}

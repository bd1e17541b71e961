//! InfiniBand transport headers as RoCEv2 carries them: BTH, RETH, AETH, DETH,
//! ImmDt. Field layouts per IBTA Vol 1 chapter 9; all fields in network order.

use std::fmt;

use crate::transport::Psn;

/// UDP destination port of RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// Length of the Base Transport Header (BTH) in bytes.
pub const BTH_LEN: usize = 12;
/// Length of the RETH in bytes: virtual address (8), R_Key (4), DMA length (4).
pub const RETH_LEN: usize = 16;
/// Length of the AETH in bytes: syndrome (1) and MSN (3).
pub const AETH_LEN: usize = 4;
/// Length of the DETH in bytes: Q_Key (4), a reserved byte and the source QP (3).
pub const DETH_LEN: usize = 8;
/// Length of the ImmDt header in bytes: one network-order 32-bit immediate.
pub const IMMDT_LEN: usize = 4;
/// Length of the invariant CRC that closes every RoCEv2 packet, in bytes.
pub const ICRC_LEN: usize = 4;
/// The P_Key every rctb QP uses (pkey index 0 on rxe and mlx5 defaults).
pub const DEFAULT_PKEY: u16 = 0xFFFF;

/// A BTH opcode: transport class in bits 7:5, operation in bits 4:0.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Opcode(pub u8);

impl Opcode {
    /// RC SEND First (0x00): opens a multi-packet SEND; no extended headers.
    pub const SEND_FIRST: Opcode = Opcode(0x00);
    /// RC SEND Middle (0x01): a SEND packet that is neither the first nor the last.
    pub const SEND_MIDDLE: Opcode = Opcode(0x01);
    /// RC SEND Last (0x02): closes a multi-packet SEND.
    pub const SEND_LAST: Opcode = Opcode(0x02);
    /// RC SEND Last with Immediate (0x03): closes a SEND and carries an ImmDt.
    pub const SEND_LAST_IMM: Opcode = Opcode(0x03);
    /// RC SEND Only (0x04): a whole SEND in one packet.
    pub const SEND_ONLY: Opcode = Opcode(0x04);
    /// RC SEND Only with Immediate (0x05): a one-packet SEND with an ImmDt.
    pub const SEND_ONLY_IMM: Opcode = Opcode(0x05);
    /// RC RDMA WRITE First (0x06): opens a multi-packet WRITE; carries the RETH of the
    /// whole message.
    pub const WRITE_FIRST: Opcode = Opcode(0x06);
    /// RC RDMA WRITE Middle (0x07): no extended headers.
    pub const WRITE_MIDDLE: Opcode = Opcode(0x07);
    /// RC RDMA WRITE Last (0x08): closes a multi-packet WRITE.
    pub const WRITE_LAST: Opcode = Opcode(0x08);
    /// RC RDMA WRITE Last with Immediate (0x09): closes a WRITE and carries an ImmDt.
    pub const WRITE_LAST_IMM: Opcode = Opcode(0x09);
    /// RC RDMA WRITE Only (0x0A): a whole WRITE in one packet, with a RETH.
    pub const WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA WRITE Only with Immediate (0x0B): RETH, then ImmDt.
    pub const WRITE_ONLY_IMM: Opcode = Opcode(0x0B);
    /// RC RDMA READ Request (0x0C): a RETH naming the remote buffer and the length to
    /// read; no payload.
    pub const READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC RDMA READ Response First (0x0D): carries an AETH.
    pub const READ_RESPONSE_FIRST: Opcode = Opcode(0x0D);
    /// RC RDMA READ Response Middle (0x0E): the only READ response without an AETH.
    pub const READ_RESPONSE_MIDDLE: Opcode = Opcode(0x0E);
    /// RC RDMA READ Response Last (0x0F): carries an AETH.
    pub const READ_RESPONSE_LAST: Opcode = Opcode(0x0F);
    /// RC RDMA READ Response Only (0x10): a whole READ response in one packet, with an
    /// AETH.
    pub const READ_RESPONSE_ONLY: Opcode = Opcode(0x10);
    /// RC Acknowledge (0x11): an AETH carrying an ACK, RNR NAK or NAK.
    pub const ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC Atomic Acknowledge (0x12): AETH, then the AtomicAckETH with the original
    /// remote value.
    pub const ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// RC Compare & Swap request (0x13): carries an AtomicETH.
    pub const COMPARE_SWAP: Opcode = Opcode(0x13);
    /// RC Fetch & Add request (0x14): carries an AtomicETH.
    pub const FETCH_ADD: Opcode = Opcode(0x14);
    /// RC SEND Last with Invalidate (0x16): closes a SEND and carries an IETH.
    pub const SEND_LAST_INV: Opcode = Opcode(0x16);
    /// RC SEND Only with Invalidate (0x17): a one-packet SEND with an IETH.
    pub const SEND_ONLY_INV: Opcode = Opcode(0x17);
    /// UD SEND Only (CM MADs on QP1).
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND Only with Immediate (0x65): DETH, then ImmDt.
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

    /// Whether the transport class (bits 7:5) is RC (0).
    pub const fn is_rc(self) -> bool {
        self.class() == 0
    }

    /// Whether the transport class (bits 7:5) is UD (3).
    pub const fn is_ud(self) -> bool {
        self.class() == 3
    }

    /// Whether a RETH follows the BTH: RDMA WRITE First, WRITE Only (with or
    /// without Immediate) and RDMA READ Request.
    pub const fn has_reth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x06 | 0x0A | 0x0B | 0x0C)
    }

    /// Whether an AETH follows the BTH: READ Response First, Last and Only,
    /// Acknowledge and Atomic Acknowledge.
    pub const fn has_aeth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x0D | 0x0F | 0x10 | 0x11 | 0x12)
    }

    /// Whether an ImmDt is carried: the RC SEND and WRITE opcodes "with Immediate"
    /// (0x03, 0x05, 0x09, 0x0B) and UD SEND Only with Immediate.
    pub const fn has_immdt(self) -> bool {
        (self.is_rc() && matches!(self.op(), 0x03 | 0x05 | 0x09 | 0x0B)) || (self.is_ud() && self.op() == 0x05)
    }

    /// SEND Last/Only with Invalidate carry an IETH (4 bytes, the rkey).
    pub const fn has_ieth(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x16 | 0x17)
    }

    /// Whether a DETH follows the BTH: every UD opcode.
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

    /// Whether this is a SEND packet: RC 0x00..=0x05, SEND with Invalidate (0x16,
    /// 0x17), or any UD opcode.
    pub const fn is_send(self) -> bool {
        (self.is_rc() && matches!(self.op(), 0x00..=0x05 | 0x16 | 0x17)) || self.is_ud()
    }

    /// Whether this is an RC RDMA WRITE packet (0x06..=0x0B).
    pub const fn is_write(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x06..=0x0B)
    }

    /// Whether this is an RC RDMA READ Response packet (0x0D..=0x10).
    pub const fn is_read_response(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x0D..=0x10)
    }

    /// What an RC responder sends: Acknowledge, Atomic Acknowledge or a
    /// READ response (everything else is a request).
    pub const fn is_response(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x0D..=0x12)
    }

    /// First packet of a multi-packet message.
    pub const fn is_first(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x00 | 0x06 | 0x0D)
    }

    /// Middle packet of a multi-packet SEND, WRITE or READ response.
    pub const fn is_middle(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x01 | 0x07 | 0x0E)
    }

    /// Last packet of a multi-packet SEND, WRITE or READ response, including the
    /// with-Immediate and with-Invalidate variants.
    pub const fn is_last(self) -> bool {
        self.is_rc() && matches!(self.op(), 0x02 | 0x03 | 0x08 | 0x09 | 0x0F | 0x16)
    }

    /// A message in a single packet: an RC SEND, WRITE or READ Response Only opcode
    /// (any variant) or any UD opcode. READ Request, atomics and acknowledges
    /// are none of First, Middle, Last or Only.
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
    /// Opcode (byte 0).
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// MigReq (byte 1, bit 6): the path migration state of the sender.
    pub mig_req: bool,
    /// Pad count: payload bytes added to reach a multiple of 4 (0..=3).
    pub pad: u8,
    /// Transport header version (4 bits, 0).
    pub tver: u8,
    /// Partition key, P_Key (bytes 2..4); rctb sends [`DEFAULT_PKEY`].
    pub pkey: u16,
    /// Byte 4: FECN bit 7, BECN bit 6, reserved 5:0 (RoCEv2 "resv8a").
    pub resv8a: u8,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// AckReq (byte 8, bit 7): the requester asks for an acknowledge of this packet.
    pub ack_req: bool,
    /// Bits 6:0 of byte 8 (reserved).
    pub resv7: u8,
    /// Packet sequence number, PSN (bytes 9..12, 24 bits).
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

    /// FECN, bit 7 of [`resv8a`](Self::resv8a): forward explicit congestion
    /// notification.
    pub fn fecn(&self) -> bool {
        self.resv8a & 0x80 != 0
    }

    /// BECN, bit 6 of [`resv8a`](Self::resv8a): backward explicit congestion
    /// notification.
    pub fn becn(&self) -> bool {
        self.resv8a & 0x40 != 0
    }
}

/// RDMA Extended Transport Header (16 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reth {
    /// Virtual address (bytes 0..8) in the responder's memory where the WRITE or
    /// READ starts.
    pub va: u64,
    /// R_Key (bytes 8..12) of the remote memory region.
    pub rkey: u32,
    /// DMA length (bytes 12..16): bytes of the whole WRITE or READ message, not
    /// of this packet.
    pub dma_len: u32,
}

/// ACK Extended Transport Header (4 bytes): syndrome and MSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Aeth {
    /// Syndrome (byte 0): bits 6:5 choose ACK, RNR NAK, reserved or NAK and bits
    /// 4:0 hold the credit count, RNR timer code or NAK code; see
    /// [`kind`](Self::kind).
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// NAK codes of AETH syndromes 0x60..=0x7F.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// Code 0 (syndrome 0x60): PSN sequence error, the responder saw a PSN beyond
    /// the one it expected.
    PsnSequenceError,
    /// Code 1 (syndrome 0x61): invalid request.
    InvalidRequest,
    /// Code 2 (syndrome 0x62): remote access error, e.g. a bad R_Key, address
    /// range or access right.
    RemoteAccessError,
    /// Code 3 (syndrome 0x63): remote operational error, the responder could not
    /// complete a valid request.
    RemoteOperationalError,
    /// Code 4 (syndrome 0x64): invalid RD request (Reliable Datagram only).
    InvalidRdRequest,
    /// A reserved code (the low 5 bits).
    Reserved(u8),
}

impl NakCode {
    /// The NAK code in the low 5 bits of `code`; the upper bits are ignored.
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

    /// The value of the code in syndrome bits 4:0; the inverse of
    /// [`from_low_bits`](Self::from_low_bits).
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

    /// Lowercase name of the code, as [`AckKind`]'s `Display` prints it.
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
        /// Credit count code (syndrome bits 4:0).
        credits: u8,
    },
    /// RNR NAK with a min RNR timer code (IBA table 45).
    RnrNak {
        /// Min RNR NAK timer code, 0..=31 (syndrome bits 4:0).
        timer: u8,
    },
    /// Syndrome 0x40..=0x5F is reserved.
    Reserved,
    /// Syndrome 0x60..=0x7F: a NAK and its code.
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
    /// An ACK of `msn` (masked to 24 bits) with credit code 0x1F, as rxe sends it.
    pub fn ack(msn: u32) -> Self {
        // rxe sends credit code 0x1F ("invalid": credits not used).
        Aeth { syndrome: 0x1F, msn: msn & 0x00FF_FFFF }
    }

    /// An RNR NAK: syndrome 0x20 with `timer_code` (low 5 bits) as the min RNR
    /// timer, MSN masked to 24 bits.
    pub fn rnr_nak(timer_code: u8, msn: u32) -> Self {
        Aeth { syndrome: 0x20 | (timer_code & 0x1F), msn: msn & 0x00FF_FFFF }
    }

    /// A NAK: syndrome 0x60 with `code` in the low 5 bits, MSN masked to 24 bits.
    pub fn nak(code: NakCode, msn: u32) -> Self {
        Aeth { syndrome: 0x60 | code.low_bits(), msn: msn & 0x00FF_FFFF }
    }

    /// What the syndrome says; bit 7 (reserved) is ignored.
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
    /// Q_Key (bytes 0..4) that the receiving UD QP checks.
    pub qkey: u32,
    /// Byte 4, reserved; kept as read so the header re-encodes byte for byte.
    pub resv8: u8,
    /// Source QP (bytes 5..8, 24 bits).
    pub src_qp: u32,
}

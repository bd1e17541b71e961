//! What the owners of endpoints count of the packets the endpoints send:
//! one classification ([`PacketClass`]) and one set of counts
//! ([`SentCounts`]), kept the same way by the simulator (`FabricStats`) and
//! the udp reactor (`EngineStats`), so that a scenario's counters mean the
//! same on both backends. It does not count what the engine counts itself
//! (retransmissions, timeouts: [`EndpointCounters`](crate::EndpointCounters))
//! nor what a backend's links or sockets do to the packets.
//!
//! # CM MADs
//!
//! Both backends count the CM messages an endpoint sends, retransmissions
//! included, in `cm_sent`, and only there: `frames_sent` and `bytes_sent`
//! are RC frames. The simulator carries CM messages as values
//! ([`Endpoint::poll_cm_transmit`](crate::Endpoint::poll_cm_transmit)),
//! never as frames, so they are in neither its frame counts nor its pcap;
//! the udp reactor sends them as QP1 frames
//! ([`Endpoint::poll_cm_packet`](crate::Endpoint::poll_cm_packet)), which
//! its pcap shows, so a udp capture holds `frames_sent + cm_sent` frames.

use rctb_core::wire::roce::{AckKind, NakCode, Opcode};

use crate::Packet;

/// What a sent packet is, as the counters see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// A request (or anything else no kind counter names).
    Request,
    /// An ACK.
    Ack,
    /// An RNR NAK.
    RnrNak,
    /// A PSN sequence error NAK.
    SeqNak,
    /// Another NAK (invalid request, remote access, remote operation).
    OtherNak,
    /// An RDMA READ response packet.
    ReadResponse,
    /// An atomic acknowledge.
    AtomicAck,
    /// A CM MAD (a UD packet to QP1, with a DETH).
    Cm,
}

impl PacketClass {
    /// The class of `pkt`.
    #[inline]
    pub fn of(pkt: &Packet) -> PacketClass {
        let op = pkt.bth.opcode;
        // The two usual packets first: an ACK, then a request.
        if op == Opcode::ACKNOWLEDGE {
            match pkt.aeth.map(|a| a.kind()) {
                Some(AckKind::Ack { .. }) => PacketClass::Ack,
                Some(AckKind::RnrNak { .. }) => PacketClass::RnrNak,
                Some(AckKind::Nak(NakCode::PsnSequenceError)) => PacketClass::SeqNak,
                Some(_) => PacketClass::OtherNak,
                None => PacketClass::Request,
            }
        } else if op.is_response() {
            if op.is_read_response() {
                PacketClass::ReadResponse
            } else if op == Opcode::ATOMIC_ACKNOWLEDGE {
                PacketClass::AtomicAck
            } else {
                PacketClass::Request
            }
        } else if pkt.deth.is_some() {
            PacketClass::Cm
        } else {
            PacketClass::Request
        }
    }
}

/// Counts of the packets an owner's endpoints sent, by [`PacketClass`],
/// kept alike by the simulator and the udp reactor. Every field is a count
/// of packets unless named otherwise.
///
/// CM messages, retransmissions included, are counted in `cm_sent` only,
/// on both backends: the simulator carries them as values
/// ([`Endpoint::poll_cm_transmit`](crate::Endpoint::poll_cm_transmit),
/// [`count_cm_message`](Self::count_cm_message)), never as frames, and the
/// udp reactor sends them as QP1 frames
/// ([`Endpoint::poll_cm_packet`](crate::Endpoint::poll_cm_packet)), which
/// its capture shows, so a udp capture holds `frames_sent + cm_sent` frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SentCounts {
    /// RC frames sent (CM MADs are in `cm_sent`).
    pub frames_sent: u64,
    /// Their Ethernet bytes (without preamble and FCS).
    pub bytes_sent: u64,
    /// ACKs sent.
    pub acks: u64,
    /// RNR NAKs sent.
    pub rnr_naks: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks: u64,
    /// Other NAKs sent (invalid request, remote access, remote operation).
    pub other_naks: u64,
    /// READ response packets sent.
    pub read_responses: u64,
    /// Atomic acknowledges sent.
    pub atomic_acks: u64,
    /// CM messages sent, retransmissions included.
    pub cm_sent: u64,
}

impl SentCounts {
    /// Counts `pkt`, a frame of `wire_len` bytes (`pkt.wire_len()`).
    #[inline]
    pub fn count(&mut self, pkt: &Packet, wire_len: usize) {
        let class = PacketClass::of(pkt);
        if class == PacketClass::Cm {
            self.cm_sent += 1;
            return;
        }
        self.frames_sent += 1;
        self.bytes_sent += wire_len as u64;
        match class {
            PacketClass::Request | PacketClass::Cm => {}
            PacketClass::Ack => self.acks += 1,
            PacketClass::RnrNak => self.rnr_naks += 1,
            PacketClass::SeqNak => self.seq_naks += 1,
            PacketClass::OtherNak => self.other_naks += 1,
            PacketClass::ReadResponse => self.read_responses += 1,
            PacketClass::AtomicAck => self.atomic_acks += 1,
        }
    }

    /// Counts a CM message sent as a value rather than as a frame (the
    /// simulator's).
    #[inline]
    pub fn count_cm_message(&mut self) {
        self.cm_sent += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rctb_core::transport::Psn;
    use rctb_core::wire::roce::{Aeth, Bth, Deth};

    fn pkt(op: Opcode) -> Packet {
        let mut p = Packet::empty(Vec::new());
        p.bth = Bth::new(op, 0x11, Psn::wrapping(0));
        p
    }

    #[test]
    fn classifies_as_both_backends_count() {
        let with_aeth = |aeth| Packet { aeth: Some(aeth), ..pkt(Opcode::ACKNOWLEDGE) };
        assert_eq!(PacketClass::of(&with_aeth(Aeth::ack(1))), PacketClass::Ack);
        assert_eq!(PacketClass::of(&with_aeth(Aeth::rnr_nak(3, 1))), PacketClass::RnrNak);
        assert_eq!(PacketClass::of(&with_aeth(Aeth::nak(NakCode::PsnSequenceError, 1))), PacketClass::SeqNak);
        assert_eq!(PacketClass::of(&with_aeth(Aeth::nak(NakCode::RemoteAccessError, 1))), PacketClass::OtherNak);
        assert_eq!(PacketClass::of(&pkt(Opcode::ACKNOWLEDGE)), PacketClass::Request, "no AETH: no kind");
        assert_eq!(PacketClass::of(&pkt(Opcode::READ_RESPONSE_LAST)), PacketClass::ReadResponse);
        assert_eq!(PacketClass::of(&pkt(Opcode::ATOMIC_ACKNOWLEDGE)), PacketClass::AtomicAck);
        assert_eq!(PacketClass::of(&pkt(Opcode::SEND_ONLY)), PacketClass::Request);
        let mad = Packet { deth: Some(Deth { qkey: 0x8001_0000, resv8: 0, src_qp: 1 }), ..pkt(Opcode::UD_SEND_ONLY) };
        assert_eq!(PacketClass::of(&mad), PacketClass::Cm);
    }

    #[test]
    fn cm_mads_are_counted_apart_from_rc_frames() {
        let mut c = SentCounts::default();
        c.count(&pkt(Opcode::SEND_ONLY), 100);
        c.count(&Packet { aeth: Some(Aeth::ack(1)), ..pkt(Opcode::ACKNOWLEDGE) }, 62);
        let mad = Packet { deth: Some(Deth { qkey: 0x8001_0000, resv8: 0, src_qp: 1 }), ..pkt(Opcode::UD_SEND_ONLY) };
        c.count(&mad, 322);
        c.count_cm_message();
        assert_eq!((c.frames_sent, c.bytes_sent, c.acks, c.cm_sent), (2, 162, 1, 2));
    }
}

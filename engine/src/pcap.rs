//! The capture both owners of endpoints write (feature `pcap`): each packet
//! an endpoint sent, as the Ethernet / IPv4 / UDP 4791 / BTH / ... / ICRC
//! frame a NIC would send, in a little-endian nanosecond pcap (what Linux
//! writes and `icrc_check.py` reads), so `rctb decode`, Wireshark and tshark
//! show simulated and UDP traffic the way they show rxe's.
//!
//! It owns the file format and the frame encoding; where the bytes go
//! (memory, a file) is the owner's `W`, and the time stamps and MAC
//! addresses are the owner's too (the simulator's virtual time, the UDP
//! reactor's clock). It does not decide which packets are recorded.

use std::io::Write;

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rctb_core::time::{Duration, Instant};
use rctb_core::wire::roce::{FrameBuilder, MacAddr};

use crate::Packet;

/// A pcap of RoCEv2 frames being written into `W`.
pub struct PcapSink<W: Write> {
    writer: PcapWriter<W>,
    frame: Vec<u8>,
    /// Frames the encoder or the writer refused (never expected; counted,
    /// not fatal: the capture is a witness, not the data path).
    pub encode_errors: u64,
}

impl<W: Write> std::fmt::Debug for PcapSink<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PcapSink").field("encode_errors", &self.encode_errors).finish_non_exhaustive()
    }
}

fn header() -> PcapHeader {
    PcapHeader {
        datalink: DataLink::ETHERNET,
        ts_resolution: pcap_file::TsResolution::NanoSecond,
        snaplen: 65535,
        // Little-endian like the captures Linux writes (and what
        // icrc_check.py reads).
        endianness: pcap_file::Endianness::Little,
        ..PcapHeader::default()
    }
}

impl PcapSink<Vec<u8>> {
    /// A capture kept in memory, taken with [`into_inner`](Self::into_inner).
    pub fn in_memory() -> Self {
        PcapSink::new(Vec::new()).expect("writing to a Vec cannot fail")
    }
}

impl<W: Write> PcapSink<W> {
    /// A capture into `out`; writes the file header at once.
    pub fn new(out: W) -> Result<Self, pcap_file::PcapError> {
        let writer = PcapWriter::with_header(out, header())?;
        Ok(PcapSink { writer, frame: Vec::with_capacity(4200), encode_errors: 0 })
    }

    /// Records `pkt` as sent at `at` from `src_mac` to `dst_mac`. A packet
    /// damaged on the way (`pkt.corrupt`) is shown where its receiver sees
    /// the damage: with a bad ICRC.
    pub fn record(&mut self, at: Instant, src_mac: [u8; 6], dst_mac: [u8; 6], pkt: &Packet) {
        let mut b = FrameBuilder::new(MacAddr(src_mac), MacAddr(dst_mac), pkt.src_ip, pkt.dst_ip);
        b.udp_src_port = pkt.udp_src_port;
        let ext = pkt.ext_headers();
        self.frame.clear();
        if b.build(pkt.bth, ext, &pkt.payload, &mut self.frame).is_err() {
            self.encode_errors += 1;
            return;
        }
        if pkt.corrupt
            && let Some(last) = self.frame.last_mut()
        {
            *last ^= 0xFF;
        }
        let ts = Duration::from_nanos(at.as_nanos());
        let packet = PcapPacket::new(ts, self.frame.len() as u32, &self.frame);
        if self.writer.write_packet(&packet).is_err() {
            self.encode_errors += 1;
        }
    }

    /// The writer, with every recorded frame written into it.
    pub fn into_inner(self) -> W {
        self.writer.into_writer()
    }
}

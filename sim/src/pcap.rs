//! Every simulated packet as a real RoCEv2 frame (Ethernet / IPv4 / UDP 4791
//! / BTH / ... / ICRC) in a nanosecond pcap, as tcpdump on the sender's port
//! would capture it, so Wireshark and tshark show simulated traffic the way
//! they show rxe's.

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rctb_core::time::{Duration, Instant};
use rctb_core::wire::roce::{FrameBuilder, MacAddr};

use rctb_engine::Packet;

#[derive(Debug)]
pub struct PcapSink {
    writer: PcapWriter<Vec<u8>>,
    frame: Vec<u8>,
    /// Frames the encoder refused (never expected; counted, not fatal).
    pub encode_errors: u64,
}

impl PcapSink {
    pub fn new() -> Self {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            snaplen: 65535,
            // Little-endian like the captures Linux writes (and what
            // icrc_check.py reads).
            endianness: pcap_file::Endianness::Little,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(Vec::new(), header).expect("writing to a Vec cannot fail");
        PcapSink { writer, frame: Vec::with_capacity(4200), encode_errors: 0 }
    }

    pub(crate) fn record(&mut self, at: Instant, src_mac: [u8; 6], dst_mac: [u8; 6], pkt: &Packet) {
        let mut b = FrameBuilder::new(MacAddr(src_mac), MacAddr(dst_mac), pkt.src_ip, pkt.dst_ip);
        b.udp_src_port = pkt.udp_src_port;
        let ext = pkt.ext_headers();
        self.frame.clear();
        if b.build(pkt.bth, ext, &pkt.payload, &mut self.frame).is_err() {
            self.encode_errors += 1;
            return;
        }
        if pkt.corrupt {
            // Show the damage where the receiver sees it: a bad ICRC.
            if let Some(last) = self.frame.last_mut() {
                *last ^= 0xFF;
            }
        }
        let ts = Duration::from_nanos(at.as_nanos());
        let packet = PcapPacket::new(ts, self.frame.len() as u32, &self.frame);
        if self.writer.write_packet(&packet).is_err() {
            self.encode_errors += 1;
        }
    }

    /// The finished pcap file.
    pub fn into_bytes(self) -> Vec<u8> {
        self.writer.into_writer()
    }
}

impl Default for PcapSink {
    fn default() -> Self {
        Self::new()
    }
}

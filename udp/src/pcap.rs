//! What a reactor's endpoints send, as a pcap: each frame as the Ethernet
//! / IPv4 / UDP 4791 / BTH / ... / ICRC frame a NIC would send (the
//! simulator's capture format: MAC addresses 02:00:00:00:HI:LO by endpoint
//! index, nanosecond stamps of the reactor's clock, little-endian), so
//! `rctb decode`, Wireshark and the wiretrace tools read both alike.

use pcap_file::DataLink;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use rctb_core::time::{Duration, Instant};
use rctb_core::wire::roce::{FrameBuilder, MacAddr};
use rctb_engine::Packet;

pub(crate) struct PcapSink {
    writer: PcapWriter<Vec<u8>>,
    frame: Vec<u8>,
}

impl PcapSink {
    pub fn new() -> Self {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ts_resolution: pcap_file::TsResolution::NanoSecond,
            snaplen: 65535,
            endianness: pcap_file::Endianness::Little,
            ..PcapHeader::default()
        };
        let writer = PcapWriter::with_header(Vec::new(), header).expect("writing to a Vec cannot fail");
        PcapSink { writer, frame: Vec::with_capacity(4200) }
    }

    /// Records `pkt` as sent at `at` (a frame the encoder refuses is left out).
    pub fn record(&mut self, at: Instant, src_mac: [u8; 6], dst_mac: [u8; 6], pkt: &Packet) {
        let mut b = FrameBuilder::new(MacAddr(src_mac), MacAddr(dst_mac), pkt.src_ip, pkt.dst_ip);
        b.udp_src_port = pkt.udp_src_port;
        let ext = pkt.ext_headers();
        self.frame.clear();
        if b.build(pkt.bth, ext, &pkt.payload, &mut self.frame).is_err() {
            return;
        }
        let ts = Duration::from_nanos(at.as_nanos());
        let _ = self.writer.write_packet(&PcapPacket::new(ts, self.frame.len() as u32, &self.frame));
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.writer.into_writer()
    }
}

//! The reactor's receiving side: frames read from the sockets (raw or
//! UDP), checked, counted, put through the path hook and handed to their
//! endpoint's engine.

use std::io;

use rctb_core::transport::TransportError;
use rctb_core::wire::roce::{AckKind, NakCode, Opcode};
use rctb_engine::{Packet, PacketDrop};
use rustix::io::Errno;

use super::{Delayed, Driver, Held, RX_BATCH, is_transient, os};
use crate::config::{Dir, Fate};
use crate::wire::{self, HEADERS_LEN, RxDrop};

impl Driver {
    /// Reads what the sockets hold (bounded per socket) and hands every
    /// good frame to its engine; returns how many frames were read.
    /// Reads every socket (a batch each); the first frame of a turn whose
    /// clock was not read (`fresh` false) reads it, so frames are stamped
    /// with the time they came.
    pub(super) fn receive(&mut self, fresh: &mut bool) -> Result<usize, TransportError> {
        let mut total = 0;
        for i in 0..self.endpoints.len() {
            for _ in 0..RX_BATCH {
                let ep = &mut self.endpoints[i];
                let got = match &ep.sockets.raw {
                    Some(raw) => match rustix::net::recv(raw, &mut self.rxbuf[..], rustix::net::RecvFlags::empty()) {
                        Ok((n, _)) => Some(n),
                        Err(Errno::AGAIN) | Err(Errno::INTR) => None,
                        Err(e) => return Err(os("recv (raw)", e.into())),
                    },
                    None => match ep.sockets.udp.recv_from(&mut self.rxbuf[HEADERS_LEN..]) {
                        Ok((n, std::net::SocketAddr::V4(src))) => {
                            let mut hdr = [0u8; HEADERS_LEN];
                            wire::synth_headers(&mut hdr, src, ep.local, n);
                            self.rxbuf[..HEADERS_LEN].copy_from_slice(&hdr);
                            Some(HEADERS_LEN + n)
                        }
                        Ok(_) => Some(0),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
                        Err(e) if is_transient(&e) => Some(0),
                        Err(e) => return Err(os("recvfrom", e)),
                    },
                };
                let Some(n) = got else { break };
                if !*fresh {
                    self.advance();
                    self.now_reads += 1;
                    *fresh = true;
                }
                total += 1;
                self.handle_rx(i, n);
            }
        }
        Ok(total)
    }

    fn handle_rx(&mut self, i: usize, n: usize) {
        let payload = self.pool.pop().unwrap_or_default();
        let ep = &mut self.endpoints[i];
        let n = n.min(self.rxbuf.len());
        match wire::decode(&mut self.rxbuf[..n], *ep.local.ip(), ep.local.port(), payload) {
            Ok(pkt) => {
                ep.stats.rx_frames += 1;
                ep.stats.rx_bytes += n.saturating_sub(HEADERS_LEN) as u64;
                if let Some(aeth) = pkt.aeth.filter(|_| pkt.bth.opcode == Opcode::ACKNOWLEDGE) {
                    match aeth.kind() {
                        AckKind::Ack { .. } => ep.stats.rx_acks += 1,
                        AckKind::RnrNak { .. } => ep.stats.rx_naks_rnr += 1,
                        AckKind::Nak(NakCode::PsnSequenceError) => ep.stats.rx_naks_seq += 1,
                        _ => ep.stats.rx_naks_other += 1,
                    }
                }
                let fate = ep.hook.as_mut().map_or(Fate::Pass, |hook| hook(Dir::Rx, &pkt));
                match fate {
                    Fate::Drop => ep.stats.rx_dropped += 1,
                    Fate::Duplicate => {
                        ep.stats.rx_duplicated += 1;
                        self.deliver(i, &pkt);
                        self.deliver(i, &pkt);
                    }
                    Fate::Pass => self.deliver(i, &pkt),
                    Fate::Delay(d) => {
                        ep.stats.rx_delayed += 1;
                        let held = pkt.clone();
                        self.delayed.push(Delayed { due: self.now + d, ep: i, held: Held::Rx(held) });
                    }
                }
                self.recycle(pkt.payload);
            }
            Err((why, payload)) => {
                match why {
                    RxDrop::NotForUs => ep.stats.rx_foreign += 1,
                    RxDrop::BadIcrc { .. } => ep.stats.rx_bad_icrc += 1,
                    RxDrop::Malformed(_) => ep.stats.rx_malformed += 1,
                    RxDrop::Unsupported(_) => ep.stats.rx_unsupported += 1,
                }
                self.recycle(payload);
            }
        }
    }

    /// Hands a checked frame to endpoint `i`'s engine, now.
    pub(super) fn deliver(&mut self, i: usize, pkt: &Packet) {
        match self.endpoints[i].engine.handle_packet(self.now, pkt) {
            Ok(()) => self.counters.delivered += 1,
            Err(PacketDrop::NoSuchQp) => self.counters.dropped_no_qp += 1,
            Err(PacketDrop::BadMad(_)) => self.counters.dropped_bad_mad += 1,
        }
    }
}

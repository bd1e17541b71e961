//! The reactor's sending side: frames taken from the engines (CM first,
//! then RC in bursts per endpoint), counted, captured, put through the
//! path hook and sent with `sendmmsg`.

use std::io::{self, IoSlice};
use std::net::SocketAddrV4;

use rctb_core::time::Instant;
use rctb_core::transport::TransportError;
use rctb_engine::Packet;
use rustix::io::Errno;
use rustix::net::SocketAddrAny;
use smallvec::SmallVec;

use super::{Delayed, Driver, Endpoint, Held, Pending, TX_BURST, TX_CHUNK, is_transient, os};
use crate::config::{Dir, Fate};
use crate::wire;

impl Driver {
    /// Takes up to [`TX_CHUNK`] frames from the engines, [`TX_BURST`] from
    /// each in turn, and sends them; returns how many.
    pub(super) fn flush(&mut self) -> Result<usize, TransportError> {
        let now = self.now;
        let mut sent = 0;
        // CM first: its MADs are few, and they open and close the QPs the
        // RC frames run on.
        for i in 0..self.endpoints.len() {
            while self.endpoints[i].engine.wants_cm_transmit() {
                let mut buf = self.pool.pop().unwrap_or_default();
                let Some(pkt) = self.endpoints[i].engine.poll_cm_packet(&mut buf) else {
                    self.recycle(buf);
                    break;
                };
                sent += 1;
                let r = self.transmit(i, &pkt);
                self.recycle(pkt.payload);
                r?;
            }
        }
        let r = self.flush_rc(now, sent);
        // Whatever the outcome, nothing encoded stays behind.
        let pending = self.send_pending();
        let sent = r?;
        pending?;
        Ok(sent)
    }

    /// The RC part of [`flush`](Self::flush): up to [`TX_CHUNK`] frames,
    /// [`TX_BURST`] per endpoint in turn.
    fn flush_rc(&mut self, now: Instant, mut sent: usize) -> Result<usize, TransportError> {
        loop {
            let before = sent;
            for i in 0..self.endpoints.len() {
                let mut burst = 0;
                while burst < TX_BURST && sent < TX_CHUNK && self.endpoints[i].engine.wants_transmit() {
                    let mut buf = self.pool.pop().unwrap_or_default();
                    let Some(tx) = self.endpoints[i].engine.poll_transmit(now, &mut buf) else {
                        self.recycle(buf);
                        break;
                    };
                    burst += 1;
                    sent += 1;
                    let r = self.transmit(i, &tx.packet);
                    self.recycle(tx.packet.payload);
                    r?;
                }
                self.send_queued(i)?;
            }
            if sent == before || sent >= TX_CHUNK {
                return Ok(sent);
            }
        }
    }

    /// Counts and records one frame endpoint `i`'s engine sent, then puts
    /// it through the hook onto the socket.
    fn transmit(&mut self, i: usize, pkt: &Packet) -> Result<(), TransportError> {
        self.sent.count(pkt, pkt.wire_len());
        if let Some(pcap) = self.pcap.as_mut() {
            let dst = self.endpoints.iter().find(|e| e.engine.ip() == pkt.dst_ip).map_or([0xff; 6], |e| e.mac);
            pcap.record(self.now, self.endpoints[i].mac, dst, pkt);
        }
        let fate = self.endpoints[i].hook.as_mut().map_or(Fate::Pass, |hook| hook(Dir::Tx, pkt));
        let ep = &mut self.endpoints[i];
        if fate == Fate::Drop {
            ep.stats.tx_dropped += 1;
            return Ok(());
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        let Ok(start) = wire::encode(pkt, ep.local.port(), ep.peer_port, &mut buf) else {
            ep.stats.tx_errors += 1;
            self.recycle(buf);
            return Ok(());
        };
        let to = SocketAddrV4::new(pkt.dst_ip, ep.peer_port);
        match fate {
            Fate::Delay(d) => {
                ep.stats.tx_delayed += 1;
                buf.drain(..start);
                let due = self.now + d;
                self.delayed.push(Delayed { due, ep: i, held: Held::Tx { to, datagram: buf } });
            }
            Fate::Duplicate => {
                ep.stats.tx_duplicated += 1;
                let mut twin = self.pool.pop().unwrap_or_default();
                twin.extend_from_slice(&buf);
                ep.txq.push(Pending { buf: twin, start, to });
                ep.txq.push(Pending { buf, start, to });
            }
            Fate::Pass | Fate::Drop => ep.txq.push(Pending { buf, start, to }),
        }
        if self.endpoints[i].txq.len() >= TX_BURST {
            self.send_queued(i)?;
        }
        Ok(())
    }

    /// Sends every endpoint's queued datagrams.
    fn send_pending(&mut self) -> Result<(), TransportError> {
        let mut first_error = None;
        for i in 0..self.endpoints.len() {
            if let Err(e) = self.send_queued(i) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Sends endpoint `i`'s queued datagrams, [`TX_BURST`] per `sendmmsg`,
    /// and gives their buffers back to the pool (all of them, even when a
    /// socket error stops the sending: RC recovers the frames as lost).
    fn send_queued(&mut self, i: usize) -> Result<(), TransportError> {
        let mut q = std::mem::take(&mut self.endpoints[i].txq);
        let mut r = Ok(());
        for chunk in q.chunks(TX_BURST) {
            r = send_burst(&mut self.endpoints[i], chunk);
            if r.is_err() {
                break;
            }
        }
        for p in q.drain(..) {
            self.recycle(p.buf);
        }
        self.endpoints[i].txq = q;
        r
    }
}

/// Puts one encoded datagram on endpoint `ep`'s socket, counting it.
/// One `sendmmsg` of up to [`TX_BURST`] datagrams, again past a datagram
/// the kernel refused for a passing reason (counted as a send error, as
/// [`send_datagram`] counts it).
fn send_burst(ep: &mut Endpoint, chunk: &[Pending]) -> Result<(), TransportError> {
    use rustix::net::{MMsgHdr, SendAncillaryBuffer, SendFlags};
    let addrs: SmallVec<[SocketAddrAny; TX_BURST]> = chunk.iter().map(|p| SocketAddrAny::from(p.to)).collect();
    let iovs: SmallVec<[[IoSlice<'_>; 1]; TX_BURST]> =
        chunk.iter().map(|p| [IoSlice::new(&p.buf[p.start.min(p.buf.len())..])]).collect();
    let mut controls: SmallVec<[SendAncillaryBuffer<'_, '_, '_>; TX_BURST]> =
        chunk.iter().map(|_| SendAncillaryBuffer::default()).collect();
    let mut msgs: SmallVec<[MMsgHdr<'_>; TX_BURST]> = addrs
        .iter()
        .zip(&iovs)
        .zip(controls.iter_mut())
        .map(|((addr, iov), control)| MMsgHdr::new_with_addr(addr, iov, control))
        .collect();
    let mut at = 0;
    while at < msgs.len() {
        match rustix::net::sendmmsg(&ep.sockets.udp, &mut msgs[at..], SendFlags::empty()) {
            Ok(0) => break,
            Ok(n) => {
                for p in &chunk[at..at + n] {
                    ep.stats.tx_frames += 1;
                    ep.stats.tx_bytes += (p.buf.len() - p.start.min(p.buf.len())) as u64;
                }
                at += n;
            }
            Err(Errno::INTR) => {}
            // A full socket buffer, no route, an ICMP error from an earlier
            // datagram: this frame is lost, and RC recovers as from any loss.
            Err(e) if is_transient(&io::Error::from(e)) => {
                ep.stats.tx_errors += 1;
                at += 1;
            }
            Err(e) => return Err(os("sendmmsg", e.into())),
        }
    }
    Ok(())
}

pub(super) fn send_datagram(ep: &mut Endpoint, datagram: &[u8], to: SocketAddrV4) -> Result<(), TransportError> {
    match ep.sockets.udp.send_to(datagram, to) {
        Ok(_) => {
            ep.stats.tx_frames += 1;
            ep.stats.tx_bytes += datagram.len() as u64;
            Ok(())
        }
        // A full socket buffer, no route, an ICMP error from an earlier
        // datagram: the frame is lost, and RC recovers as from any loss.
        Err(e) if is_transient(&e) => {
            ep.stats.tx_errors += 1;
            Ok(())
        }
        Err(e) => Err(os("sendto", e)),
    }
}

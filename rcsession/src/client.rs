//! [`RcClient`]: the client side of a session, with its own QP and MR.
//!
//! Per transfer: [`RcClient::begin`] makes the PREPARE request (token =
//! our QPN, GID, MR address and rkey); [`RcClient::connect`] takes the
//! PREPARE reply, moves our QP RESET -> INIT -> RTR -> RTS towards the
//! server's QP and, for GET, posts the receive the server's
//! WRITE_WITH_IMM will consume; [`RcClient::start_put`] writes the object
//! into the server's staging region with the cookie as immediate; and
//! [`RcClient::poll`] checks the completion (GET: the immediate is the
//! cookie and the length the size). A BUSY answer is retried after
//! [`RcClient::on_busy`], with exponential backoff in transport time.
//! Every step is non-blocking, so many clients share one simulator.

use thiserror::Error;

use super::status::RcError;
use super::types::{PrepareReply, PrepareRequest, ReadyRequest};
use crate::hipobj::{Op, PrincipalId, RdmaToken, SessionId};
use crate::time::{Duration, Instant};
use crate::transport::{
    Access, AddressVector, CqId, Gid, InitAttr, MrInfo, Mtu, PdId, Psn, QpCaps, QpInfo, QpInit, QpTransition, RecvWr,
    RemoteAddr, RnrTimer, RtrAttr, RtsAttr, SendOp, SendWr, Sge, Transport, TransportError, WcOpcode, WcStatus,
};

const DATA_WR: u64 = 7;

/// The client's knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientConfig {
    /// IB port of the client's QP (1-based; default 1).
    pub port: u8,
    /// Index of our GID in the port's table (default 1, the IPv4 GID on
    /// rxe and the simulator); it goes into the token. `new` fails with a
    /// `Transport` error when the entry does not exist.
    pub gid_index: u32,
    /// Size of the client's data region (the largest object it moves).
    pub capacity: u64,
    /// RTS local ACK timeout code: 4.096 us x 2^code (default 14).
    pub timeout: u8,
    /// RTS transport retries, 0..=7 (default 7).
    pub retry_cnt: u8,
    /// RTS RNR retries, 0..=7, 7 = without end (default 7).
    pub rnr_retry: u8,
    /// RTR minimum RNR NAK timer code (default 12); a code outside the
    /// table falls back to the transport's default.
    pub min_rnr_timer: u8,
    /// READY attempts after BUSY before giving up.
    pub max_busy_retries: u32,
    /// First backoff after BUSY; doubles per retry, at most 64x.
    pub backoff: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            port: 1,
            gid_index: 1,
            capacity: 1 << 20,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_busy_retries: 8,
            backoff: Duration::from_micros(100),
        }
    }
}

/// A client-side failure.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ClientError {
    /// A local verb failed (the error names the verb).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The session server refused a call; never made by the client itself,
    /// it lets code driving both sides use `?`.
    #[error("server: {0}")]
    Server(#[from] RcError),
    /// [`RcClient::begin`] asked for more bytes than our region holds.
    #[error("size {size} exceeds the client's region of {capacity} bytes")]
    TooLarge {
        /// Bytes requested.
        size: u64,
        /// [`ClientConfig::capacity`].
        capacity: u64,
    },
    /// The data phase's work request completed with an error status
    /// (flush errors are skipped).
    #[error("the data phase completed with {0}")]
    Completion(WcStatus),
    /// A GET's data arrived without the session's cookie as immediate.
    #[error("received immediate {got:?}, expected the cookie {expected:#010x}")]
    Immediate {
        /// The immediate received (`None`: none).
        got: Option<u32>,
        /// The transfer's cookie.
        expected: u32,
    },
    /// A GET received a byte count other than the transfer's size.
    #[error("received {got} bytes, expected {expected}")]
    Length {
        /// Bytes received.
        got: u32,
        /// The transfer's size.
        expected: u64,
    },
    /// READY answered BUSY again after [`ClientConfig::max_busy_retries`]
    /// retries; carries the retries made.
    #[error("READY answered BUSY {0} times")]
    BusyExhausted(u32),
    /// A step called out of order (the text names it): `start_put` before
    /// PREPARE's reply or on a GET, `post_get_recv` on a PUT or twice.
    #[error("{0} called in the wrong phase")]
    Phase(&'static str),
}

/// Where a transfer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferPhase {
    /// PREPARE request made, no reply yet.
    Preparing,
    /// QP connected (GET: receive posted); READY may be sent.
    Connected,
    /// READY sent; the data phase runs.
    Moving,
    /// [`RcClient::poll`] saw this transfer's data-phase completion.
    Done,
}

/// One transfer's client-side state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientTransfer {
    /// The principal the transfer runs as (also READY's).
    pub principal: PrincipalId,
    /// GET or PUT.
    pub op: Op,
    /// The target PREPARE names.
    pub target: String,
    /// Bytes to move, at most [`ClientConfig::capacity`].
    pub size: u64,
    /// Our QP's first send PSN, 1..=0xFFFFFF.
    pub psn: Psn,
    /// The immediate the data carries and READY repeats.
    pub cookie: u32,
    /// Where the transfer is.
    pub phase: TransferPhase,
    /// The session, once [`RcClient::connect`] took PREPARE's reply.
    pub session: Option<SessionId>,
    /// PREPARE's reply, once [`RcClient::connect`] took it.
    pub reply: Option<PrepareReply>,
    /// BUSY answers retried so far (see [`RcClient::on_busy`]).
    pub busy_retries: u32,
    /// Not before this instant may READY be retried (backoff).
    pub retry_at: Instant,
    recv_posted: bool,
}

fn qp_init(pd: PdId, cq: CqId) -> QpInit {
    let caps = QpCaps { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 };
    QpInit { pd, send_cq: cq, recv_cq: cq, caps, sq_sig_all: true, srq: None }
}

/// The client: one QP per session (a fresh QPN from `begin`), one CQ, one
/// data region.
#[derive(Debug)]
pub struct RcClient<T: Transport> {
    t: T,
    cfg: ClientConfig,
    pd: PdId,
    cq: CqId,
    qp: QpInfo,
    mr: MrInfo,
    gid: Gid,
    mtu: Mtu,
}

impl<T: Transport> RcClient<T> {
    /// Creates the client's PD, CQ, QP and data region (rolled back on
    /// failure).
    pub fn new(mut t: T, cfg: ClientConfig) -> Result<Self, ClientError> {
        let port = t.port(cfg.port)?;
        let gid = port.gids.iter().find(|g| g.index == cfg.gid_index).map(|g| g.gid).ok_or(TransportError::invalid(
            crate::transport::Verb::QueryPort,
            "gid_index",
            cfg.gid_index as u64,
            "no such GID",
        ))?;
        let pd = t.alloc_pd()?;
        let made = (|| -> Result<(CqId, QpInfo, MrInfo), TransportError> {
            let cq = t.create_cq(16)?;
            let qp = match t.create_qp(&qp_init(pd, cq)) {
                Ok(qp) => qp,
                Err(e) => {
                    let _ = t.destroy_cq(cq);
                    return Err(e);
                }
            };
            match t.reg_mr(pd, cfg.capacity.max(1), Access::LOCAL_WRITE | Access::REMOTE_WRITE) {
                Ok(mr) => Ok((cq, qp, mr)),
                Err(e) => {
                    let _ = t.destroy_qp(qp.id);
                    let _ = t.destroy_cq(cq);
                    Err(e)
                }
            }
        })();
        match made {
            Ok((cq, qp, mr)) => Ok(RcClient { t, cfg, pd, cq, qp, mr, gid, mtu: port.active_mtu }),
            Err(e) => {
                let _ = t.dealloc_pd(pd);
                Err(e.into())
            }
        }
    }

    /// The transport the client runs on.
    pub fn transport(&self) -> &T {
        &self.t
    }

    /// The transport, e.g. to `wait` on [`RcClient::cq`].
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.t
    }

    /// Our QP's number; [`RcClient::begin`] makes a new QP, so it changes
    /// with every transfer.
    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// Our one CQ (the data phase's completions): what a driver waits on
    /// before [`RcClient::poll`].
    pub fn cq(&self) -> CqId {
        self.cq
    }

    /// Our data region ([`ClientConfig::capacity`] bytes): a GET lands and
    /// a PUT's object is sent from its offset 0.
    pub fn region(&self) -> MrInfo {
        self.mr
    }

    /// Our endpoint token (the PREPARE `token` header), advertising `size`
    /// bytes of our region.
    pub fn token(&self, size: u64) -> RdmaToken {
        RdmaToken {
            rkey: self.mr.rkey,
            remote_addr: self.mr.addr,
            length: size,
            ..RdmaToken::rc(self.qp.qpn, self.gid, self.cfg.port)
        }
    }

    /// Starts a transfer and returns it with its PREPARE request. `psn` is
    /// taken modulo 2^24 (0 becomes 1: the header forbids it).
    pub fn begin(
        &mut self,
        principal: PrincipalId,
        op: Op,
        target: &str,
        size: u64,
        psn: u32,
        cookie: u32,
    ) -> Result<(ClientTransfer, PrepareRequest), ClientError> {
        if size > self.cfg.capacity {
            return Err(ClientError::TooLarge { size, capacity: self.cfg.capacity });
        }
        self.fresh_qp()?;
        let psn = match Psn::wrapping(psn) {
            p if p.get() == 0 => Psn::wrapping(1),
            p => p,
        };
        let req = PrepareRequest {
            principal,
            op,
            target: target.to_string(),
            offset: 0,
            size,
            client_psn: psn.get(),
            cookie,
            client_token: Some(self.token(size).to_hex()),
        };
        let xfer = ClientTransfer {
            principal,
            op,
            target: target.to_string(),
            size,
            psn,
            cookie,
            phase: TransferPhase::Preparing,
            session: None,
            reply: None,
            busy_retries: 0,
            retry_at: Instant::ZERO,
            recv_posted: false,
        };
        Ok((xfer, req))
    }

    /// Replaces our QP with a new one (a new QPN) for a new session. RoCE's
    /// BTH carries no source QPN and server PSNs are QPN-derived (so close
    /// for sessions made back to back), so a QP reused across sessions
    /// would accept a still-retransmitting old server QP's packets as the
    /// new session's: a new QPN makes them miss.
    fn fresh_qp(&mut self) -> Result<(), ClientError> {
        let qp = self.t.create_qp(&qp_init(self.pd, self.cq))?;
        let old = std::mem::replace(&mut self.qp, qp);
        self.t.destroy_qp(old.id)?;
        Ok(())
    }

    /// Copies the object to send (PUT) into our region.
    pub fn write_payload(&mut self, data: &[u8]) -> Result<(), ClientError> {
        self.t.mr_write(self.mr.id, 0, data)?;
        Ok(())
    }

    /// Copies what a GET received out of our region.
    pub fn read_payload(&self, buf: &mut [u8]) -> Result<(), ClientError> {
        self.t.mr_read(self.mr.id, 0, buf)?;
        Ok(())
    }

    /// Takes the PREPARE reply: connects our QP to the server's (RESET,
    /// INIT, RTR, RTS) and, for a GET when `post_recv`, posts the receive
    /// (`post_recv` means nothing for a PUT).
    /// Returns the READY request.
    pub fn connect(
        &mut self,
        xfer: &mut ClientTransfer,
        reply: &PrepareReply,
        post_recv: bool,
    ) -> Result<ReadyRequest, ClientError> {
        xfer.session = Some(reply.session);
        xfer.reply = Some(reply.clone());
        self.reconnect(xfer)?;
        if post_recv && xfer.op == Op::Get {
            self.post_get_recv(xfer)?;
        }
        xfer.phase = TransferPhase::Connected;
        Ok(self.ready_request(xfer))
    }

    fn reconnect(&mut self, xfer: &mut ClientTransfer) -> Result<(), ClientError> {
        let reply = xfer.reply.as_ref().ok_or(ClientError::Phase("connect"))?;
        let server_gid = reply.reply_token.map_or(self.gid, |t| t.gid);
        let qp = self.qp.id;
        self.t.modify_qp(qp, &QpTransition::Reset)?;
        // Completions of an earlier transfer or attempt (a PUT's late
        // RETRY_EXC_ERR, say) must not be taken for this one's.
        let mut wcs = Vec::new();
        while self.t.poll_cq(self.cq, 16, &mut wcs)? > 0 {
            wcs.clear();
        }
        self.t.modify_qp(
            qp,
            &QpTransition::Init(InitAttr {
                pkey_index: 0,
                port: self.cfg.port,
                access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            }),
        )?;
        let rtr = RtrAttr {
            path_mtu: self.mtu,
            dest_qpn: reply.server_qpn,
            rq_psn: Psn::wrapping(reply.server_psn),
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::from_code(self.cfg.min_rnr_timer).unwrap_or_default(),
            av: AddressVector { port: self.cfg.port, ..AddressVector::new(server_gid, self.cfg.gid_index) },
        };
        self.t.modify_qp(qp, &QpTransition::Rtr(rtr))?;
        let rts = RtsAttr {
            sq_psn: xfer.psn,
            timeout: self.cfg.timeout,
            retry_cnt: self.cfg.retry_cnt,
            rnr_retry: self.cfg.rnr_retry,
            max_rd_atomic: 1,
        };
        self.t.modify_qp(qp, &QpTransition::Rts(rts))?;
        xfer.recv_posted = false;
        Ok(())
    }

    /// Posts the receive a GET's WRITE_WITH_IMM consumes (a slow client
    /// posts it late: the server then sees RNR NAKs).
    pub fn post_get_recv(&mut self, xfer: &mut ClientTransfer) -> Result<(), ClientError> {
        if xfer.op != Op::Get || xfer.recv_posted {
            return Err(ClientError::Phase("post_get_recv"));
        }
        let sge = [Sge::new(self.mr.id, 0, xfer.size as u32)];
        self.t.post_recv(self.qp.id, &RecvWr::new(DATA_WR, &sge))?;
        xfer.recv_posted = true;
        Ok(())
    }

    /// Whether the GET receive is posted on the transfer's current
    /// connection (a reconnect clears it).
    pub fn recv_posted(&self, xfer: &ClientTransfer) -> bool {
        xfer.recv_posted
    }

    /// The READY request of a connected transfer.
    pub fn ready_request(&self, xfer: &ClientTransfer) -> ReadyRequest {
        ReadyRequest {
            principal: xfer.principal,
            session: xfer.session.unwrap_or(SessionId(0)),
            cookie: xfer.cookie,
            client_qpn: self.qp.qpn,
            client_mr_addr: self.mr.addr,
            client_mr_rkey: self.mr.rkey,
        }
    }

    /// READY was sent: a PUT now writes the object into the staging region
    /// with the cookie as immediate.
    pub fn start_put(&mut self, xfer: &mut ClientTransfer) -> Result<(), ClientError> {
        let reply = xfer.reply.as_ref().ok_or(ClientError::Phase("start_put"))?;
        if xfer.op != Op::Put {
            return Err(ClientError::Phase("start_put"));
        }
        let remote = RemoteAddr { addr: reply.staging_addr, rkey: reply.staging_rkey };
        let sge = [Sge::new(self.mr.id, 0, xfer.size as u32)];
        let wr = SendWr::new(DATA_WR, SendOp::WriteWithImm { remote, imm: xfer.cookie }, &sge);
        self.t.post_send(self.qp.id, &wr)?;
        xfer.phase = TransferPhase::Moving;
        Ok(())
    }

    /// Marks READY as sent (GET).
    pub fn ready_sent(&mut self, xfer: &mut ClientTransfer) {
        xfer.phase = TransferPhase::Moving;
    }

    /// Checks for the data phase's completion: `Some(())` when this
    /// transfer's data moved intact. A GET is complete only here (the
    /// receive with the cookie landed in our region). A PUT is complete
    /// when READY answers OK: its WRITE's own completion may come late or
    /// as RETRY_EXC_ERR, because the server may destroy its QP before the
    /// last ACK leaves; the next transfer's reset discards it.
    pub fn poll(&mut self, xfer: &mut ClientTransfer) -> Result<Option<()>, ClientError> {
        let mut wcs = Vec::new();
        self.t.poll_cq(self.cq, 4, &mut wcs)?;
        for wc in wcs.iter().filter(|wc| wc.wr_id == DATA_WR) {
            if wc.status == WcStatus::WrFlushErr {
                continue;
            }
            if wc.status != WcStatus::Success {
                return Err(ClientError::Completion(wc.status));
            }
            match (xfer.op, wc.opcode) {
                (Op::Get, WcOpcode::RecvRdmaWithImm) => {
                    if wc.imm != Some(xfer.cookie) {
                        return Err(ClientError::Immediate { got: wc.imm, expected: xfer.cookie });
                    }
                    if u64::from(wc.byte_len) != xfer.size {
                        return Err(ClientError::Length { got: wc.byte_len, expected: xfer.size });
                    }
                    xfer.phase = TransferPhase::Done;
                    return Ok(Some(()));
                }
                (Op::Put, WcOpcode::RdmaWrite) => {
                    xfer.phase = TransferPhase::Done;
                    return Ok(Some(()));
                }
                _ => {}
            }
        }
        Ok(None)
    }

    /// READY answered BUSY: reset and reconnect our QP (the server's went
    /// back to INIT, so both restart from the PREPARE PSNs), re-post the
    /// GET receive, and set the backoff. Err once the retries are spent.
    pub fn on_busy(&mut self, xfer: &mut ClientTransfer) -> Result<ReadyRequest, ClientError> {
        xfer.busy_retries += 1;
        if xfer.busy_retries > self.cfg.max_busy_retries {
            return Err(ClientError::BusyExhausted(xfer.busy_retries - 1));
        }
        self.reconnect(xfer)?;
        if xfer.op == Op::Get {
            self.post_get_recv(xfer)?;
        }
        let shift = (xfer.busy_retries - 1).min(6);
        xfer.retry_at = self.t.now() + self.cfg.backoff * (1u32 << shift);
        xfer.phase = TransferPhase::Connected;
        Ok(self.ready_request(xfer))
    }

    /// Moves our QP to RESET (after a failed or abandoned transfer), so
    /// nothing more reaches our region.
    pub fn abandon(&mut self, xfer: &mut ClientTransfer) -> Result<(), ClientError> {
        self.t.modify_qp(self.qp.id, &QpTransition::Reset)?;
        xfer.recv_posted = false;
        Ok(())
    }

    /// Destroys the client's verbs objects.
    pub fn close(mut self) -> Result<(), ClientError> {
        self.t.destroy_qp(self.qp.id)?;
        self.t.destroy_cq(self.cq)?;
        self.t.dereg_mr(self.mr.id)?;
        self.t.dealloc_pd(self.pd)?;
        Ok(())
    }
}

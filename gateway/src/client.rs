//! The gateway's client: S3-style objects over hipobj-rc-v2.
//!
//! [`ControlPlane`] speaks the HTTP side (every request SigV4-signed with
//! `aws-sigv4`, through [`auth::sign`]); [`ObjectClient`] runs a whole
//! transfer: PREPARE (with our QP, GID and region in the token) -> connect
//! our QP (`rctb_core::rcsession::RcClient`) -> READY -> data phase, with
//! BUSY (409) retried after an exponential backoff, and a CANCEL on every
//! failure after PREPARE succeeded.
//!
//! The RDMA side runs wherever its transport lives: [`RdmaRunner`] takes
//! jobs on an [`RdmaPort`] (any `RcClient<T>`). [`RdmaThread`] owns one on
//! a thread of its own (verbs, udp: the transport is built there, so it
//! need not be `Send`); tests on the simulator run the port on the server's
//! engine thread, in the same simulated fabric.
//!
//! A PUT's data moves as the client's RDMA WRITE with immediate, posted
//! right after READY is sent: the server's QP reaches RTR only while it
//! handles READY, so the first packets may find it in INIT and be dropped
//! (rxe drops them silently); RC retransmits after the local ACK timeout
//! ([`ClientConfig::timeout`]), so pick it with the server's READY latency
//! in mind (retry_cnt + 1 timeouts must cover it).
//!
//! Objects of 0 bytes cannot move over RDMA (a session moves 1 byte or
//! more): [`ObjectClient::put`] stores them with an S3 PutObject carrying
//! the (empty) body, and `get` learns every size from HeadObject first.

use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration as StdDuration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use rctb_core::rcsession::{
    ClientConfig, ClientError, ClientTransfer, Op, PrepareReply, PrepareRequest, RcClient, ReadyRequest,
};
use rctb_core::transport::Transport;
use rctb_core::wire::hipobj::{
    CancelHeaders, Crc64Nvme, PrepareHeaders, PrincipalId, RdmaToken, ReadyHeaders, SessionId, parse_psn,
};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::auth::{self, Clock, User};
use crate::http::{BUSY_MESSAGE, CAPABILITIES};

mod control;
mod parts;
mod rdma;
mod roundtrip;

use control::SEGMENT;
pub use control::{ControlPlane, parse_s3_url, target};
pub use parts::{PartInfo, part_target, upload_part_target};
pub use rdma::{RdmaJob, RdmaPort, RdmaRunner, RdmaThread};
pub use roundtrip::{RoundtripReport, roundtrip};

/// Why a client call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ObjectError {
    /// The gateway answered an error (S3-style XML body).
    /// `capabilities`: the answer's `x-amz-rdma-capabilities`, when it had
    /// one (the request had reached a session).
    #[error("{route}: HTTP {status} {code}: {message}")]
    Http {
        /// The route (`PREPARE`, `READY`, `HeadObject`, ...).
        route: String,
        /// The HTTP status.
        status: u16,
        /// The S3 error code (`NoSuchKey`, `SlowDown`, ...).
        code: String,
        /// The error message.
        message: String,
        /// The answer's capabilities header.
        capabilities: Option<String>,
    },
    /// The gateway URL is not `http://host:port`.
    #[error("{0}")]
    Endpoint(String),
    /// The TCP connection failed.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// `host:port`.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The HTTP exchange failed.
    #[error("HTTP: {0}")]
    Transport(String),
    /// The request could not be signed.
    #[error("signing: {0}")]
    Sign(String),
    /// A reply header is missing or malformed.
    #[error("reply: {0}")]
    Reply(String),
    /// The RDMA side failed.
    #[error("RDMA: {0}")]
    Rdma(#[from] ClientError),
    /// The data phase took longer than allowed.
    #[error("the data phase did not complete within {0:?}")]
    DataTimeout(StdDuration),
    /// READY kept answering BUSY.
    #[error("READY answered BUSY {0} times")]
    BusyExhausted(u32),
    /// The RDMA runner is gone.
    #[error("the RDMA client has stopped")]
    Stopped,
    /// The bucket or key breaks a rule.
    #[error("bucket/key: {0}")]
    BadPath(String),
}

impl ObjectError {
    /// The HTTP status of a gateway answer.
    pub fn status(&self) -> Option<u16> {
        match self {
            ObjectError::Http { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// Credentials and region: what signs our requests.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access and secret key.
    pub user: User,
    /// The SigV4 region.
    pub region: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("region", &self.region).finish()
    }
}

impl Credentials {
    /// These keys in `region`.
    pub fn new(access_key: &str, secret_key: &str, region: &str) -> Self {
        Credentials {
            user: User { access_key: access_key.into(), secret_key: secret_key.into(), admin: false },
            region: region.into(),
        }
    }

    /// The usual AWS environment: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, and the region from `AWS_REGION` or
    /// `AWS_DEFAULT_REGION` (default `us-east-1`). Values are passed in
    /// (`std::env::var(..).ok()`), so tests need not touch the environment.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Self, ObjectError> {
        let get = |k: &str| var(k).filter(|v| !v.is_empty());
        let (Some(a), Some(s)) = (get("AWS_ACCESS_KEY_ID"), get("AWS_SECRET_ACCESS_KEY")) else {
            return Err(ObjectError::Endpoint("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must both be set".into()));
        };
        let region = get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")).unwrap_or_else(|| "us-east-1".into());
        Ok(Credentials::new(&a, &s, &region))
    }

    /// The principal id the gateway gives these credentials.
    pub fn principal(&self) -> PrincipalId {
        PrincipalId::from_credentials(&self.user.access_key, &self.user.secret_key)
    }
}

/// `http://host:port` (no TLS, no path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port` as sent in the `host` header.
    pub authority: String,
}

impl Endpoint {
    /// Parses `http://host:port`.
    pub fn parse(url: &str) -> Result<Self, ObjectError> {
        let uri: hyper::Uri = url.parse().map_err(|e| ObjectError::Endpoint(format!("{url:?}: {e}")))?;
        if uri.scheme_str() != Some("http") {
            return Err(ObjectError::Endpoint(format!("{url:?}: must be http://host:port (no TLS)")));
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(ObjectError::Endpoint(format!("{url:?}: must have no path")));
        }
        let auth = uri.authority().ok_or_else(|| ObjectError::Endpoint(format!("{url:?}: no host")))?;
        let authority = if auth.port().is_some() { auth.as_str().to_string() } else { format!("{}:80", auth.host()) };
        Ok(Endpoint { authority })
    }

    /// The host part (an IPv4 address picks the GID on its subnet).
    pub fn host(&self) -> &str {
        self.authority.rsplit_once(':').map_or(self.authority.as_str(), |(h, _)| h)
    }
}

/// One gateway answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Its headers, in order.
    pub headers: Vec<(String, String)>,
    /// Its body.
    pub body: Bytes,
}

impl Answer {
    /// Header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, ObjectError> {
        self.header(name).ok_or_else(|| ObjectError::Reply(format!("{name}: missing")))
    }

    fn xml_field(&self, tag: &str) -> String {
        let body = String::from_utf8_lossy(&self.body);
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        body.split(&open).nth(1).and_then(|s| s.split(&close).next()).unwrap_or("").to_string()
    }

    /// The `x-amz-rdma-capabilities` header (`mp`: multipart).
    pub fn capabilities(&self) -> Option<&str> {
        self.header(CAPABILITIES.0)
    }

    fn into_error(self, route: &str) -> ObjectError {
        ObjectError::Http {
            route: route.to_string(),
            status: self.status,
            code: self.xml_field("Code"),
            message: self.xml_field("Message"),
            capabilities: self.capabilities().map(str::to_string),
        }
    }
}

/// What READY answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadyAnswer {
    /// 200: the data phase is done.
    Ok {
        /// Bytes moved.
        bytes: u64,
        /// The object's ETag (a PUT's).
        etag: Option<String>,
        /// The object's version id (a PUT's).
        version_id: Option<String>,
        /// `x-amz-rdma-capabilities` (`mp` from a versitygw-like gateway).
        capabilities: Option<String>,
    },
    /// 409 BUSY: the peer was not ready; READY may be retried.
    Busy,
}

/// An object's size, ETag and version id (HeadObject).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Bytes.
    pub size: u64,
    /// ETag.
    pub etag: String,
    /// Version id.
    pub version_id: String,
}

/// Reports a transfer's progress (the CLI draws bars from it).
pub trait Progress: Send + Sync {
    /// A new phase starts ("staging", "RDMA WRITE", "commit", ...).
    fn phase(&self, _what: &str) {}
    /// `n` more bytes were copied into or out of the region.
    fn advance(&self, _n: u64) {}
}

/// No progress display.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoProgress;
impl Progress for NoProgress {}

/// The client's knobs beyond [`ClientConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransferOptions {
    /// READY attempts after BUSY before giving up.
    pub max_busy_retries: u32,
    /// First backoff after BUSY (doubles each time, at most 64x).
    pub backoff: StdDuration,
    /// How long a GET waits for its receive after READY answered OK.
    pub get_timeout: StdDuration,
    /// Copy granularity into and out of the region (progress steps).
    pub chunk: usize,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            max_busy_retries: 8,
            backoff: StdDuration::from_millis(2),
            get_timeout: StdDuration::from_secs(10),
            chunk: 1 << 20,
        }
    }
}

/// What a PUT or GET did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transferred {
    /// Bytes moved.
    pub size: u64,
    /// The object's ETag.
    pub etag: String,
    /// The object's version id.
    pub version_id: String,
    /// READYs answered BUSY before the one that worked.
    pub busy_retries: u32,
    /// READY's `x-amz-rdma-capabilities` (none without a data phase).
    pub capabilities: Option<String>,
}

/// Objects over one gateway and one RDMA port.
pub struct ObjectClient {
    cp: Arc<ControlPlane>,
    rdma: Arc<dyn RdmaRunner>,
    rng: Mutex<ChaCha8Rng>,
    /// Timeouts, retries and sizes of each transfer.
    pub opts: TransferOptions,
}

impl fmt::Debug for ObjectClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectClient").field("cp", &self.cp).field("rdma", &self.rdma).finish_non_exhaustive()
    }
}

impl ObjectClient {
    /// `seed` draws cookies and PSNs.
    pub fn new(cp: Arc<ControlPlane>, rdma: Arc<dyn RdmaRunner>, seed: u64) -> Self {
        ObjectClient { cp, rdma, rng: Mutex::new(ChaCha8Rng::seed_from_u64(seed)), opts: TransferOptions::default() }
    }

    /// Its control plane.
    pub fn control_plane(&self) -> &Arc<ControlPlane> {
        &self.cp
    }

    /// Runs `f` on the RDMA port.
    pub async fn rdma<X: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn RdmaPort) -> X + Send + 'static,
    ) -> Result<X, ObjectError> {
        let (tx, rx) = oneshot::channel();
        self.rdma.submit(Box::new(move |p| {
            let _ = tx.send(f(p));
        }))?;
        rx.await.map_err(|_| ObjectError::Stopped)
    }

    fn draw(&self) -> (u32, u32) {
        let mut r = self.rng.lock().unwrap_or_else(|p| p.into_inner());
        let psn = (r.next_u32() & 0xFF_FFFF).max(1);
        let cookie = r.next_u32().max(1);
        (psn, cookie)
    }

    /// Stores `data` as `bucket/key`, verified by the server with its
    /// CRC64NVME before anything is committed.
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        data: Bytes,
        progress: &dyn Progress,
    ) -> Result<Transferred, ObjectError> {
        if data.is_empty() {
            progress.phase("PutObject (empty)");
            let info = self.cp.put_inline(bucket, key, data).await?;
            return Ok(Transferred {
                size: 0,
                etag: info.etag,
                version_id: info.version_id,
                busy_retries: 0,
                capabilities: None,
            });
        }
        self.put_target(target(bucket, key), data, progress).await
    }

    /// Stores `data` (1 byte or more) at PREPARE target `t`, already
    /// percent-encoded (an object, or an upload's part).
    pub async fn put_target(
        &self,
        t: String,
        data: Bytes,
        progress: &dyn Progress,
    ) -> Result<Transferred, ObjectError> {
        let size = data.len() as u64;
        let (psn, cookie) = self.draw();
        let principal = self.cp.credentials().principal();
        let t2 = t.clone();
        let (xfer, req) = self.rdma(move |p| p.begin(principal, Op::Put, &t2, size, psn, cookie)).await??;
        progress.phase("staging");
        let chunk = self.opts.chunk.max(1);
        let mut off = 0usize;
        while off < data.len() {
            let end = (off + chunk).min(data.len());
            let piece = data.slice(off..end);
            self.rdma(move |p| p.write_at(off as u64, &piece)).await??;
            progress.advance((end - off) as u64);
            off = end;
        }
        let checksum = Crc64Nvme::of(&data);
        self.transfer(xfer, req, Some(checksum), progress).await
    }

    /// Reads `bucket/key` whole.
    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
        progress: &dyn Progress,
    ) -> Result<(Vec<u8>, Transferred), ObjectError> {
        let info = self.cp.head(bucket, key).await?;
        if info.size == 0 {
            return Ok((
                Vec::new(),
                Transferred {
                    size: 0,
                    etag: info.etag,
                    version_id: info.version_id,
                    busy_retries: 0,
                    capabilities: None,
                },
            ));
        }
        self.get_range(bucket, key, 0, info.size, progress).await
    }

    /// Reads `size` bytes at `offset` of `bucket/key`.
    pub async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        size: u64,
        progress: &dyn Progress,
    ) -> Result<(Vec<u8>, Transferred), ObjectError> {
        self.get_target(target(bucket, key), offset, size, progress).await
    }

    /// Reads `size` bytes at `offset` of PREPARE target `t`, already
    /// percent-encoded (an object, or a part of one).
    pub async fn get_target(
        &self,
        t: String,
        offset: u64,
        size: u64,
        progress: &dyn Progress,
    ) -> Result<(Vec<u8>, Transferred), ObjectError> {
        let (psn, cookie) = self.draw();
        let principal = self.cp.credentials().principal();
        let t2 = t.clone();
        let (xfer, mut req) = self.rdma(move |p| p.begin(principal, Op::Get, &t2, size, psn, cookie)).await??;
        req.offset = offset;
        let done = self.transfer(xfer, req, None, progress).await?;
        progress.phase("copying out");
        let mut out = vec![0u8; size as usize];
        let chunk = self.opts.chunk.max(1);
        let mut off = 0usize;
        while off < out.len() {
            let end = (off + chunk).min(out.len());
            let n = end - off;
            let piece = self
                .rdma(move |p| {
                    let mut b = vec![0u8; n];
                    p.read_at(off as u64, &mut b).map(|()| b)
                })
                .await??;
            out[off..end].copy_from_slice(&piece);
            progress.advance(n as u64);
            off = end;
        }
        Ok((out, done))
    }

    /// PREPARE, then READY and the data phase; CANCEL on any failure after
    /// PREPARE.
    async fn transfer(
        &self,
        mut xfer: ClientTransfer,
        req: PrepareRequest,
        checksum: Option<Crc64Nvme>,
        progress: &dyn Progress,
    ) -> Result<Transferred, ObjectError> {
        let h = PrepareHeaders {
            op: req.op,
            target: req.target.clone(),
            size: req.size,
            offset: req.offset,
            psn: req.client_psn,
            cookie: req.cookie,
            token: req.client_token.clone(),
            checksum,
        };
        progress.phase("PREPARE");
        let reply = self.cp.prepare(&h).await?;
        let session = reply.session;
        match self.after_prepare(&mut xfer, reply, progress).await {
            Ok(t) => Ok(t),
            Err(e) => {
                let mut x = xfer;
                let _ = self.rdma(move |p| p.abandon(&mut x)).await;
                let _ = self.cp.cancel(session).await;
                Err(e)
            }
        }
    }

    async fn after_prepare(
        &self,
        xfer: &mut ClientTransfer,
        reply: PrepareReply,
        progress: &dyn Progress,
    ) -> Result<Transferred, ObjectError> {
        let mut x = xfer.clone();
        let (mut x, mut ready) = self
            .rdma(move |p| {
                let r = p.connect(&mut x, &reply);
                (x, r)
            })
            .await?;
        *xfer = x.clone();
        let mut busy = 0u32;
        loop {
            let ready_req = ready?;
            progress.phase(if x.op == Op::Put { "RDMA WRITE" } else { "READY (server's RDMA WRITE)" });
            let cp = self.cp.clone();
            let answer = tokio::spawn(async move { cp.ready(&ready_req).await });
            if x.op == Op::Put {
                let mut y = x.clone();
                let (y, r) = self
                    .rdma(move |p| {
                        let r = p.start_put(&mut y);
                        (y, r)
                    })
                    .await?;
                x = y;
                *xfer = x.clone();
                if let Err(e) = r {
                    answer.abort();
                    return Err(e);
                }
            }
            let answer = answer.await.map_err(|e| ObjectError::Transport(e.to_string()))??;
            match answer {
                ReadyAnswer::Ok { bytes, etag, version_id, capabilities } => {
                    if bytes != x.size {
                        return Err(ObjectError::Reply(format!(
                            "x-amz-rdma-bytes-transferred: {bytes}, expected {}",
                            x.size
                        )));
                    }
                    if x.op == Op::Get {
                        let timeout = self.opts.get_timeout;
                        let mut y = x.clone();
                        let (y, r) = self
                            .rdma(move |p| {
                                let r = p.wait_get(&mut y, timeout);
                                (y, r)
                            })
                            .await?;
                        *xfer = y;
                        r?;
                    }
                    return Ok(Transferred {
                        size: bytes,
                        etag: etag.unwrap_or_default(),
                        version_id: version_id.unwrap_or_default(),
                        busy_retries: busy,
                        capabilities,
                    });
                }
                ReadyAnswer::Busy => {
                    busy += 1;
                    if busy > self.opts.max_busy_retries {
                        return Err(ObjectError::BusyExhausted(busy));
                    }
                    progress.phase("BUSY, retrying");
                    let mut y = x.clone();
                    let (y, r) = self
                        .rdma(move |p| {
                            let r = p.on_busy(&mut y);
                            (y, r)
                        })
                        .await?;
                    x = y;
                    *xfer = x.clone();
                    ready = r;
                    let shift = (busy - 1).min(6);
                    tokio::time::sleep(self.opts.backoff * (1u32 << shift)).await;
                }
            }
        }
    }
}

/// Resolves `host:port` (for messages and GID selection).
pub async fn resolve(endpoint: &Endpoint) -> Result<SocketAddr, ObjectError> {
    tokio::net::lookup_host(endpoint.authority.as_str())
        .await
        .map_err(|source| ObjectError::Connect { addr: endpoint.authority.clone(), source })?
        .next()
        .ok_or_else(|| ObjectError::Endpoint(format!("{}: no address", endpoint.authority)))
}

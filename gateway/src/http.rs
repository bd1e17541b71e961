//! The HTTP control plane (docs/protocols.md §3, and §3a where they differ):
//! POST `/.hipobj-rc/prepare`, `/ready`, `/cancel` with `x-amz-rdma-*`
//! headers, `GET /rc-sessions` for admins; every request SigV4-verified;
//! errors as S3-style XML; and the plain S3 object routes (the `objects`
//! module: GetObject, PutObject and UploadPart streamed to the store, the
//! multipart routes, ListObjectsV2).
//!
//! As versitygw's RC routes answer: READY's qpn must be non-zero (QPN 0,
//! the C layer's control-plane-only mode, only when the gateway runs in
//! that test mode, [`GatewayOptions::control_plane_only`]); targets are
//! decoded and classified by [`crate::store`]'s target rules (GetPart for
//! a GET with `partNumber`); a READY whose data phase failed answers by
//! its outcome ([`ReadyOutcome::http`]); and `x-amz-rdma-capabilities: mp`
//! ([`CAPABILITIES`]) is on READY's success answer and on the error
//! answers given once a session exists (a GET PREPARE whose object read
//! failed, a READY whose data phase or commit failed), never on a
//! successful PREPARE or a failure before a session exists.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rctb_core::rcsession::{Op, PrepareRequest, RcError, ReadyOutcome, ReadyRequest, Usage};
use rctb_core::wire::hipobj::{
    CancelHeaders, Crc64Nvme, HeaderError, PROTOCOL, ParamError, PrepareHeaders, ReadyHeaders, format_hex_u32,
    format_psn,
};
use tokio::net::TcpListener;
use tokio::sync::Notify;

use crate::auth::{self, AuthError, Clock, Principal, Users};
use crate::engine::{Engine, EngineError, PutData, ReadyWait};
use crate::store::{ObjectPath, ObjectStore, StoreError, Target};

/// Request bodies larger than this are refused (the control plane carries
/// everything in headers), except the two below.
pub const MAX_BODY: usize = 64 * 1024;

/// The largest CompleteMultipartUpload body (10000 parts of about 100
/// bytes each).
pub const MAX_XML_BODY: usize = 2 << 20;

/// The default largest object or part an S3 PUT may store (S3's own limit
/// for a single PutObject, 5 GiB); [`GatewayOptions::max_object_size`].
pub const DEFAULT_MAX_OBJECT_SIZE: u64 = 5 << 30;

/// The message of a READY answered BUSY (409): the client may retry.
pub const BUSY_MESSAGE: &str = "BUSY: the peer was not ready; READY may be retried";

/// The capability header and its value (`mp`: multipart, i.e. UploadPart
/// and GetPart targets).
pub const CAPABILITIES: (&str, &str) = ("x-amz-rdma-capabilities", "mp");

/// What a gateway is started with beyond its parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GatewayOptions {
    /// Test mode: READY with `x-amz-rdma-qpn: 0` runs the C layer's
    /// control-plane-only data phase (nothing moves, the answer says
    /// `size` bytes, a PUT commits nothing). Off, QPN 0 is refused with
    /// 400 InvalidRdmaRequest, as versitygw's route does.
    pub control_plane_only: bool,
    /// The highest part number a target may name (at most 10000).
    pub max_part_number: u32,
    /// The largest body a PutObject or UploadPart over plain HTTP may
    /// carry (bytes; the body is streamed to the store, never held in
    /// memory). Larger ones are refused with 400 EntityTooLarge, before
    /// reading when Content-Length says so, else when the limit is
    /// crossed; nothing is stored. Default [`DEFAULT_MAX_OBJECT_SIZE`].
    pub max_object_size: u64,
}

impl Default for GatewayOptions {
    fn default() -> Self {
        GatewayOptions {
            control_plane_only: false,
            max_part_number: crate::store::MAX_PART_NUMBER,
            max_object_size: DEFAULT_MAX_OBJECT_SIZE,
        }
    }
}

/// The gateway's shared state.
#[derive(Clone)]
pub struct Gateway {
    /// The session engine's handle.
    pub engine: Engine,
    /// The object backend.
    pub store: Arc<dyn ObjectStore>,
    /// Who may sign requests.
    pub users: Arc<Users>,
    /// The SigV4 region requests must be signed for.
    pub region: String,
    /// The time SigV4 checks skew against.
    pub clock: Clock,
    /// Admission control during shutdown.
    pub gate: Arc<Gate>,
    /// Test and compatibility switches.
    pub opts: GatewayOptions,
}

impl Gateway {
    /// A gateway with the default [`GatewayOptions`] (no test mode).
    pub fn new(engine: Engine, store: Arc<dyn ObjectStore>, users: Users, region: &str, clock: Clock) -> Self {
        Gateway {
            engine,
            store,
            users: Arc::new(users),
            region: region.to_string(),
            clock,
            gate: Arc::default(),
            opts: GatewayOptions::default(),
        }
    }

    /// The same gateway with `opts`.
    pub fn with_options(mut self, opts: GatewayOptions) -> Self {
        self.opts = opts;
        self
    }

    /// Graceful shutdown: from now on every request answers 503; the
    /// requests already admitted (a READY whose data phase runs, a PUT
    /// being committed) finish; then the session server closes (the
    /// sessions still prepared are torn down).
    pub async fn shutdown(&self) {
        self.gate.close().await;
        let _ = self.engine.call(|s| s.close()).await;
    }
}

/// Admission of requests: counts those in progress, refuses new ones once
/// closing (the service lifecycle's TryEnter / Leave / Close, for HTTP).
#[derive(Debug, Default)]
pub struct Gate {
    active: AtomicUsize,
    closing: AtomicBool,
    drained: Notify,
}

/// An admitted request; dropping it leaves.
#[derive(Debug)]
pub struct Admitted<'a>(&'a Gate);

impl Gate {
    /// Admits a request, or `None` once closing.
    pub fn enter(&self) -> Option<Admitted<'_>> {
        self.active.fetch_add(1, Ordering::SeqCst);
        if self.closing.load(Ordering::SeqCst) {
            self.leave();
            return None;
        }
        Some(Admitted(self))
    }

    fn leave(&self) {
        if self.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.drained.notify_waiters();
        }
    }

    /// Whether shutdown has begun (new requests are refused).
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Requests in progress.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Stops admissions and waits until every admitted request has left.
    pub async fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        loop {
            let drained = self.drained.notified();
            if self.active() == 0 {
                return;
            }
            drained.await;
        }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").field("region", &self.region).field("opts", &self.opts).finish_non_exhaustive()
    }
}

/// An error answer: status, S3 code, message; `capabilities` when the
/// request had already created (or reached) a session, so the answer
/// carries [`CAPABILITIES`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ErrorReply {
    /// The HTTP status.
    pub status: u16,
    /// The S3 error code.
    pub code: &'static str,
    /// The message.
    pub message: String,
    /// Whether the answer carries the capabilities header.
    pub capabilities: bool,
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

impl ErrorReply {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ErrorReply { status, code, message: message.into(), capabilities: false }
    }

    /// The same answer, given after a session existed (with the
    /// capability header).
    pub fn after_session(mut self) -> Self {
        self.capabilities = true;
        self
    }

    fn bad(message: impl Into<String>) -> Self {
        Self::new(400, "InvalidRdmaRequest", message)
    }

    /// The S3-style XML body, naming `resource`.
    pub fn xml(&self, resource: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{}</Code><Message>{}</Message><Resource>{}</Resource></Error>",
            self.code,
            xml_escape(&self.message),
            xml_escape(resource)
        )
    }
}

impl From<AuthError> for ErrorReply {
    fn from(e: AuthError) -> Self {
        let status = if matches!(e, AuthError::Unsupported(_)) { 501 } else { 403 };
        ErrorReply::new(status, e.code(), e.to_string())
    }
}

impl From<RcError> for ErrorReply {
    fn from(e: RcError) -> Self {
        let (status, code) = e.http();
        // SESSION answers exactly as NO_SESSION: never reveal a session
        // that exists for someone else.
        let message = match e {
            RcError::Session | RcError::NoSession => "no such session".to_string(),
            // RcError's text says ARG for every parameter; name the status
            // it really maps to (TRUNC for an oversize value).
            RcError::Param(ref p) => format!("{}: {p}", e.status().name()),
            other => other.to_string(),
        };
        ErrorReply::new(status, code, message)
    }
}

impl From<StoreError> for ErrorReply {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoSuchKey => ErrorReply::new(404, "NoSuchKey", "the object does not exist"),
            StoreError::NoSuchUpload(_) => ErrorReply::new(
                404,
                "NoSuchUpload",
                format!("uploadId: {e} (never created, or already completed or aborted)"),
            ),
            StoreError::Unsupported(_) => ErrorReply::new(501, "NotImplemented", e.to_string()),
            StoreError::Range { .. } => ErrorReply::new(416, "InvalidRange", e.to_string()),
            StoreError::InvalidPartNumber { .. } => ErrorReply::new(416, "InvalidPartNumber", e.to_string()),
            StoreError::BadBucket(_) | StoreError::BadKey(_) | StoreError::BadPart(_) | StoreError::BadQuery { .. } => {
                ErrorReply::bad(format!("x-amz-rdma-target: {e}"))
            }
            StoreError::Backend { unavailable: true, .. } => ErrorReply::new(503, "ServiceUnavailable", e.to_string()),
            StoreError::Corrupt { .. }
            | StoreError::Io { .. }
            | StoreError::Backend { .. }
            | StoreError::BadStore { .. } => ErrorReply::new(500, "InternalError", e.to_string()),
        }
    }
}

impl From<EngineError> for ErrorReply {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Rc(e) => e.into(),
            EngineError::Store(e) => e.into(),
            EngineError::Stopped => ErrorReply::new(503, "RdmaServiceUnavailable", "the session engine has stopped"),
        }
    }
}

impl From<ParamError> for ErrorReply {
    fn from(e: ParamError) -> Self {
        RcError::Param(e).into()
    }
}

/// A request's headers (core's header-set parsers match names
/// case-insensitively).
struct Headers(Vec<(String, String)>);

impl Headers {
    /// The header list as (name, value) pairs for core's header-set parsers.
    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
}

type Reply = Result<Vec<(&'static str, String)>, ErrorReply>;

/// The answer to a header set core's parser refused. A malformed session
/// id is answered as an unknown one (NO_SESSION), so the shape of ids
/// reveals nothing.
fn header_error(e: HeaderError) -> ErrorReply {
    match e {
        HeaderError::Param(ParamError::Invalid { field: "session", .. }) => RcError::NoSession.into(),
        HeaderError::Param(p) => p.into(),
        HeaderError::Token(t) => RcError::Token(t).into(),
        HeaderError::Checksum(c) => RcError::Checksum(c).into(),
        // Missing, Repeated, Range, and any a later parser adds: the
        // request is malformed.
        other => ErrorReply::bad(other.to_string()),
    }
}

async fn prepare(gw: &Gateway, who: &Principal, h: &Headers) -> Reply {
    let PrepareHeaders { op, target, size, offset, psn, cookie, token, checksum } =
        PrepareHeaders::parse(h.pairs()).map_err(header_error)?;
    // Validation: decode and classify the target before any session exists.
    let Target { path, get_part } = ObjectPath::from_prepare_target(op, &target, gw.opts.max_part_number)?;
    let req =
        PrepareRequest { principal: who.id, op, target, offset, size, client_psn: psn, cookie, client_token: token };
    let r = match op {
        Op::Get => {
            // Read off the engine thread, before the session is made (so a
            // bad GET costs no staging). versitygw makes the session first
            // and then reads, so a failed read answers as after session
            // creation: with the capability header.
            let store = gw.store.clone();
            let p = path.clone();
            let (buf, meta) = blocking(move || {
                let mut buf = Vec::new();
                let meta = match get_part {
                    Some(n) => {
                        let part = store.head_part(&p, n)?;
                        in_range(offset, size, part.size)?;
                        buf.resize(size as usize, 0);
                        store.read_part(&p, n, offset, &mut buf)?.object
                    }
                    None => {
                        in_range(offset, size, store.head(&p)?.size)?;
                        buf.resize(size as usize, 0);
                        store.read_range(&p, offset, &mut buf)?
                    }
                };
                Ok((buf, meta))
            })
            .await
            .map_err(ErrorReply::after_session)?;
            gw.engine.call(move |s| s.prepare_get(&req, path, &buf, &meta)).await??
        }
        Op::Put => gw.engine.call(move |s| s.prepare_put(&req, path, checksum)).await??,
    };
    let mut out = vec![
        ("x-amz-rdma-protocol", PROTOCOL.to_string()),
        ("x-amz-rdma-reply", r.reply_header()),
        ("x-amz-rdma-session", r.session.to_string()),
        ("x-amz-rdma-psn", format_psn(r.server_psn)),
        ("x-amz-rdma-qpn", format!("{:x}", r.server_qpn)),
    ];
    if op == Op::Put {
        out.push(("x-amz-rdma-mr-addr", format!("{:x}", r.staging_addr)));
        out.push(("x-amz-rdma-mr-rkey", format!("{:x}", r.staging_rkey)));
    }
    Ok(out)
}

/// `offset + size` within `len` bytes (checked before a buffer is made).
fn in_range(offset: u64, size: u64, len: u64) -> Result<(), StoreError> {
    if offset.checked_add(size).is_none_or(|end| end > len) {
        return Err(StoreError::Range { offset, size, len });
    }
    Ok(())
}

/// An error after READY's data phase moved the data: a session that is
/// gone by then expired (500 SessionExpired); every such answer carries the
/// capability header.
fn after_data(e: EngineError) -> ErrorReply {
    match e {
        EngineError::Rc(RcError::NoSession | RcError::Stale(_)) => {
            let (status, code) = ReadyOutcome::Ok.http();
            ErrorReply::new(status, code, "the data moved, but the session ended before READY's answer")
        }
        other => other.into(),
    }
    .after_session()
}

/// Runs blocking backend I/O on tokio's blocking pool.
async fn blocking<X: Send + 'static>(
    f: impl FnOnce() -> Result<X, StoreError> + Send + 'static,
) -> Result<X, ErrorReply> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(ErrorReply::from),
        Err(_) => Err(ErrorReply::new(500, "InternalError", "the backend task failed")),
    }
}

async fn ready(gw: &Gateway, who: &Principal, h: &Headers) -> Reply {
    let ReadyHeaders { session, cookie, qpn, mr_addr, mr_rkey } =
        ReadyHeaders::parse(h.pairs()).map_err(header_error)?;
    if qpn == 0 && !gw.opts.control_plane_only {
        return Err(ErrorReply::bad(
            "x-amz-rdma-qpn: must be non-zero (0, the control-plane-only test mode, is off on this server)",
        ));
    }
    let req = ReadyRequest {
        principal: who.id,
        session,
        cookie,
        client_qpn: qpn,
        client_mr_addr: mr_addr,
        client_mr_rkey: mr_rkey,
    };
    let (wait, meta) = gw.engine.call(move |s| s.ready(&req)).await??;
    // From here the data phase ran or runs: every answer advertises.
    let mut r = match wait {
        ReadyWait::Done(r) => r,
        ReadyWait::Pending(rx) => rx
            .await
            .map_err(|_| ErrorReply::from(EngineError::Stopped).after_session())?
            .map_err(|e| ErrorReply::from(e).after_session())?,
    };
    if r.outcome == ReadyOutcome::Busy {
        let (status, code) = ReadyOutcome::Busy.http();
        return Err(ErrorReply::new(status, code, BUSY_MESSAGE).after_session());
    }
    // A control-plane-only READY (QPN 0) moved nothing: a PUT commits
    // nothing (its staging region holds zeroes, not the client's object).
    if meta.op == Op::Put && qpn != 0 {
        let PutData { view, data } =
            gw.engine.call(move |s| s.take_put(&session)).await.and_then(|r| r).map_err(after_data)?;
        let engine = gw.engine.clone();
        let abort = move || async move {
            let _ = engine.call(move |s| s.finish_put(view, false, "", "")).await;
        };
        if let Some(want) = meta.checksum {
            let got = Crc64Nvme::of(&data);
            if got != want {
                abort().await;
                return Err(ErrorReply::from(RcError::Wire {
                    outcome: ReadyOutcome::VerifyFail,
                    detail: format!("CRC64NVME {:016x} received, {:016x} declared", got.0, want.0),
                })
                .after_session());
            }
        }
        let store = gw.store.clone();
        let path = meta.path;
        let stored = match blocking(move || store.put(&path, &data)).await {
            Ok(s) => s,
            Err(e) => {
                abort().await;
                return Err(e.after_session());
            }
        };
        let (etag, version) = (stored.etag.clone(), stored.version_id.clone());
        gw.engine.call(move |s| s.finish_put(view, true, &etag, &version)).await.and_then(|r| r).map_err(after_data)?;
        r.etag = stored.etag;
        r.version_id = stored.version_id;
    } else {
        gw.engine.call(move |s| s.finish_final(&session)).await.and_then(|r| r).map_err(after_data)?;
    }
    let mut out = vec![
        ("x-amz-rdma-protocol", PROTOCOL.to_string()),
        ("x-amz-rdma-bytes-transferred", r.bytes_transferred.to_string()),
        ("x-amz-rdma-cookie", format_hex_u32(r.cookie_echo)),
        (CAPABILITIES.0, CAPABILITIES.1.to_string()),
    ];
    if !r.etag.is_empty() {
        out.push(("x-amz-rdma-etag", r.etag));
    }
    if !r.version_id.is_empty() {
        out.push(("x-amz-rdma-version-id", r.version_id));
    }
    Ok(out)
}

async fn cancel(gw: &Gateway, who: &Principal, h: &Headers) -> Reply {
    let CancelHeaders { session } = CancelHeaders::parse(h.pairs()).map_err(header_error)?;
    let id = who.id;
    gw.engine.call(move |s| s.cancel(&session, &id)).await??;
    Ok(vec![("x-amz-rdma-protocol", PROTOCOL.to_string())])
}

fn respond(status: u16, headers: Vec<(&'static str, String)>, body: String) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (k, v) in headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&v) {
            r.headers_mut().insert(k, v);
        }
    }
    r
}

fn error(e: ErrorReply, resource: &str) -> Response<Body> {
    let mut headers = vec![("content-type", "application/xml".into())];
    if e.capabilities {
        headers.push((CAPABILITIES.0, CAPABILITIES.1.to_string()));
    }
    respond(e.status, headers, e.xml(resource))
}

/// A response body: whole, or streamed from the store (GetObject).
pub type Body = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

fn full(body: impl Into<Bytes>) -> Body {
    Full::new(body.into()).map_err(|never| match never {}).boxed()
}

/// What an S3 route on `/bucket/key` is, from its method and query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObjectRoute {
    Get,
    Head,
    /// PutObject and UploadPart: the body is streamed to the store.
    Put,
    Delete,
    CreateUpload,
    CompleteUpload,
    AbortUpload,
    ListParts,
}

/// Whether `query` has the key `name` (with or without a value).
fn has_key(query: Option<&str>, name: &str) -> bool {
    query.is_some_and(|q| q.split('&').any(|p| p.split_once('=').map_or(p, |(k, _)| k) == name))
}

fn object_route(method: &Method, query: Option<&str>) -> Option<ObjectRoute> {
    let upload = has_key(query, "uploadId");
    Some(match *method {
        Method::GET if upload => ObjectRoute::ListParts,
        Method::GET => ObjectRoute::Get,
        Method::HEAD => ObjectRoute::Head,
        Method::PUT => ObjectRoute::Put,
        Method::DELETE if upload => ObjectRoute::AbortUpload,
        Method::DELETE => ObjectRoute::Delete,
        Method::POST if has_key(query, "uploads") => ObjectRoute::CreateUpload,
        Method::POST if upload => ObjectRoute::CompleteUpload,
        _ => return None,
    })
}

/// Answers one request.
pub async fn handle(gw: Gateway, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let resource = parts.uri.path().to_string();
    let Some(_admitted) = gw.gate.enter() else {
        return error(RcError::ShuttingDown.into(), &resource);
    };
    let uri = parts.uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_else(|| "/".into());
    let query = parts.uri.query();
    let headers = Headers(
        parts
            .headers
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
            .collect(),
    );
    let now = (gw.clock)();
    // `/bucket/key`: an object; `/bucket` (or `/bucket/`): a bucket.
    let is_object = !resource.starts_with("/.") && resource.trim_start_matches('/').trim_end_matches('/').contains('/');
    let route = if is_object { object_route(&parts.method, query) } else { None };
    // PutObject and UploadPart stream their body to the store: the
    // signature is checked now, the payload's hash once it has arrived.
    if route == Some(ObjectRoute::Put) {
        let r = auth::verify_streaming(&gw.users, &gw.region, now, parts.method.as_str(), &uri, &headers.0);
        let payload = match r {
            Ok((_, payload)) => payload,
            Err(e) => return error(e.into(), &resource),
        };
        return match put_object(&gw, &uri, &headers, payload, body).await {
            Ok(h) => respond(200, h, String::new()),
            Err(e) => error(e, &resource),
        };
    }
    // A CompleteMultipartUpload lists up to 10000 parts.
    let limit = if route == Some(ObjectRoute::CompleteUpload) { MAX_XML_BODY } else { MAX_BODY };
    let body = match http_body_util::Limited::new(body, limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            let message = format!("the request body is broken or larger than this route's limit of {limit} bytes");
            // The control plane's malformed-request answer; S3's on S3 routes.
            let e = if resource.starts_with("/.") {
                ErrorReply::bad(message)
            } else {
                ErrorReply::new(400, "MaxMessageLengthExceeded", message)
            };
            return error(e, &resource);
        }
    };
    let who = match auth::verify(&gw.users, &gw.region, now, parts.method.as_str(), &uri, &headers.0, &body) {
        Ok(p) => p,
        Err(e) => return error(e.into(), &resource),
    };
    let control = matches!(resource.as_str(), "/.hipobj-rc/prepare" | "/.hipobj-rc/ready" | "/.hipobj-rc/cancel");
    let xml = |x: String| respond(200, vec![("content-type", "application/xml".into())], x);
    let result = match (&parts.method, resource.as_str()) {
        (&Method::POST, "/.hipobj-rc/prepare") => prepare(&gw, &who, &headers).await,
        (&Method::POST, "/.hipobj-rc/ready") => ready(&gw, &who, &headers).await,
        (&Method::POST, "/.hipobj-rc/cancel") => cancel(&gw, &who, &headers).await,
        (&Method::GET, "/rc-sessions") => {
            if !who.admin {
                Err(ErrorReply::new(403, "AccessDenied", "listing sessions needs an admin principal"))
            } else {
                match gw.engine.call(|s| (s.is_closing(), s.list(), s.usage(), s.in_flight())).await {
                    Ok((true, ..)) => Err(RcError::ShuttingDown.into()),
                    Ok((false, list, usage, phases)) => return xml(sessions_xml(&list, &usage, phases)),
                    Err(e) => Err(e.into()),
                }
            }
        }
        _ if control || resource == "/rc-sessions" => {
            Err(ErrorReply::new(405, "MethodNotAllowed", "the method is not allowed on this resource"))
        }
        _ if is_object => {
            let p = resource.as_str();
            let answer = match route {
                Some(ObjectRoute::Head) => head_object(&gw, p, query, &headers).await,
                Some(ObjectRoute::Get) => get_object(&gw, p, query, &headers).await,
                Some(ObjectRoute::Delete) => delete_object(&gw, p, query).await,
                Some(ObjectRoute::CreateUpload) => create_upload(&gw, p, query).await.map(xml),
                Some(ObjectRoute::CompleteUpload) => complete_upload(&gw, p, query, &body).await.map(xml),
                Some(ObjectRoute::AbortUpload) => abort_upload(&gw, p, query).await,
                Some(ObjectRoute::ListParts) => list_parts(&gw, p, query).await.map(xml),
                Some(ObjectRoute::Put) | None => Err(ErrorReply::new(404, "NoSuchRoute", "no such route")),
            };
            match answer {
                Ok(r) => return r,
                Err(e) => Err(e),
            }
        }
        (&Method::GET, p) if !p.starts_with("/.") => {
            match list_objects(&gw, p.trim_matches('/'), query.unwrap_or("")).await {
                Ok(x) => return xml(x),
                Err(e) => Err(e),
            }
        }
        _ => Err(ErrorReply::new(404, "NoSuchRoute", "no such route")),
    };
    match result {
        Ok(h) => respond(200, h, String::new()),
        Err(e) => error(e, &resource),
    }
}

mod objects;
mod stream;
pub use objects::{MAX_KEYS, MAX_PARTS_LISTED};
use objects::{
    abort_upload, complete_upload, create_upload, delete_object, get_object, head_object, list_objects, list_parts,
    put_object,
};

/// The admin listing's XML (`GET /rc-sessions`):
///
/// ```xml
/// <RcSessions>
///   <Usage><Sessions>1</Sessions><StagingBytes>4096</StagingBytes><Qps>1</Qps>
///     <ReadySlotsFree>64</ReadySlotsFree><StageSlotsFree>32</StageSlotsFree>
///     <DataPhases>0</DataPhases><LeakedMrs>0</LeakedMrs><LeakedQps>0</LeakedQps>
///     <Principal><Id>..64 hex..</Id><Sessions>1</Sessions><StagingBytes>4096</StagingBytes></Principal></Usage>
///   <Session><Id>..32 hex..</Id><Principal>..64 hex..</Principal><Op>PUT</Op>
///     <Target>/bk/key</Target><Size>4096</Size><State>Prepared</State>
///     <Published>true</Published><Staged>false</Staged><ReapPending>false</ReapPending>
///     <Handles>0</Handles><ServerQpn>11</ServerQpn></Session>
/// </RcSessions>
/// ```
///
/// (one line, no indentation; sessions in id order; `ServerQpn` bare
/// lowercase hex as in PREPARE's reply).
pub fn sessions_xml(list: &[rctb_core::rcsession::SessionSummary], usage: &Usage, data_phases: usize) -> String {
    let mut b = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<RcSessions><Usage>");
    b.push_str(&format!(
        "<Sessions>{}</Sessions><StagingBytes>{}</StagingBytes><Qps>{}</Qps><ReadySlotsFree>{}</ReadySlotsFree><StageSlotsFree>{}</StageSlotsFree><DataPhases>{data_phases}</DataPhases><LeakedMrs>{}</LeakedMrs><LeakedQps>{}</LeakedQps>",
        usage.sessions, usage.staging_bytes, usage.qps, usage.ready_slots_free, usage.stage_slots_free, usage.leaked_mrs, usage.leaked_qps
    ));
    for (who, (n, bytes)) in &usage.per_user {
        b.push_str(&format!(
            "<Principal><Id>{who}</Id><Sessions>{n}</Sessions><StagingBytes>{bytes}</StagingBytes></Principal>"
        ));
    }
    b.push_str("</Usage>");
    for s in list {
        b.push_str(&format!(
            "<Session><Id>{}</Id><Principal>{}</Principal><Op>{}</Op><Target>{}</Target><Size>{}</Size><State>{:?}</State><Published>{}</Published><Staged>{}</Staged><ReapPending>{}</ReapPending><Handles>{}</Handles><ServerQpn>{:x}</ServerQpn></Session>",
            s.session, s.principal, s.op, xml_escape(&s.target), s.size, s.state, s.published, s.staged, s.reap_pending, s.handles, s.server_qpn
        ));
    }
    b.push_str("</RcSessions>");
    b
}

/// Serves connections from `listener` until the task is dropped. Each
/// request runs in its own task: a client that hangs up mid-READY does not
/// cancel it, so the session is always finished (committed or not).
pub async fn serve(gw: Gateway, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _peer): (_, SocketAddr) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let gw = gw.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let gw = gw.clone();
                async move {
                    let answer = tokio::spawn(handle(gw, req)).await.unwrap_or_else(|_| {
                        error(ErrorReply::new(500, "InternalError", "the request handler failed"), "")
                    });
                    Ok::<_, Infallible>(answer)
                }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// After the data moved, a session that is gone means it expired
    /// before READY's answer: 500 SessionExpired; every such answer
    /// advertises.
    #[test]
    fn errors_after_the_data_phase_answer_as_versitygw() {
        let table: Vec<(EngineError, u16, &str)> = vec![
            (EngineError::Rc(RcError::NoSession), 500, "SessionExpired"),
            (EngineError::Rc(RcError::Stale("PUT view")), 500, "SessionExpired"),
            (EngineError::Rc(RcError::Double("the PUT view")), 409, "RdmaSessionConflict"),
            (EngineError::Store(StoreError::NoSuchKey), 404, "NoSuchKey"),
            (EngineError::Stopped, 503, "RdmaServiceUnavailable"),
        ];
        for (e, status, code) in table {
            let what = e.to_string();
            let r = after_data(e);
            assert_eq!((r.status, r.code, r.capabilities), (status, code, true), "{what}");
        }
        // Before a session: no header.
        let r: ErrorReply = RcError::NoSession.into();
        assert!(!r.capabilities);
        let resp = error(r.after_session(), "/x");
        assert_eq!(resp.headers().get(CAPABILITIES.0).map(|v| v.to_str().unwrap()), Some("mp"));
        assert!(error(ErrorReply::bad("x"), "/x").headers().get(CAPABILITIES.0).is_none());
    }
}

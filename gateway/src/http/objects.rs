//! The S3 object routes beside the control plane, for ordinary S3 clients
//! (boto3, the aws CLI) over plain HTTP: GetObject (with one `Range`, or
//! `?partNumber=N`, the GetPart rules) and HeadObject, PutObject of any
//! size up to [`GatewayOptions::max_object_size`](super::GatewayOptions)
//! (streamed to the store), DeleteObject, ListObjectsV2, and the multipart
//! upload routes: CreateMultipartUpload, UploadPart, ListParts,
//! CompleteMultipartUpload, AbortMultipartUpload. Paths are decoded by the
//! same target rules as PREPARE's, so an object an RDMA client stored is
//! the one an S3 client reads, and the other way round.

use bytes::Bytes;
use hyper::Response;
use hyper::body::Incoming;
use rctb_core::rcsession::Op;

use super::stream::{
    AwsChunked, BodyReader, ChannelBody, Checked, Expect, Trailers, Verdict, parse_crc32, pump, too_large,
};
use super::{Body, ErrorReply, Gateway, Headers, blocking, respond, xml_escape};
use crate::auth::Payload;
use crate::store::{ObjectMeta, ObjectPath, ObjectStore, StoreError};

/// S3 HeadObject: size, ETag and version id (a client learns a GET's size
/// here). With `?partNumber=N` (the GetPart rules): the part's size as
/// Content-Length and `x-amz-mp-parts-count`, as S3 answers.
pub(super) async fn head_object(
    gw: &Gateway,
    path: &str,
    query: Option<&str>,
    h: &Headers,
) -> Result<Response<Body>, ErrorReply> {
    let (meta, len, parts) = match query {
        None => {
            let p = ObjectPath::from_target(path).map_err(object_path_error)?;
            let store = gw.store.clone();
            let meta = blocking(move || store.head(&p)).await?;
            let len = meta.size;
            (meta, len, None)
        }
        Some(q) => {
            let t = ObjectPath::from_prepare_target(Op::Get, &format!("{path}?{q}"), gw.opts.max_part_number)
                .map_err(object_path_error)?;
            let n = t.get_part.unwrap_or(1);
            let store = gw.store.clone();
            let part = blocking(move || store.head_part(&t.path, n)).await?;
            (part.object, part.size, Some(part.parts))
        }
    };
    if let Some(r) = preconditions(h, &meta)? {
        return Ok(r);
    }
    let mut headers = object_headers(&meta);
    headers.push(("accept-ranges", "bytes".into()));
    if let Some(n) = parts {
        headers.push(("x-amz-mp-parts-count", n.to_string()));
    }
    let mut r = respond(200, headers, String::new());
    r.headers_mut().insert(hyper::header::CONTENT_LENGTH, hyper::header::HeaderValue::from(len));
    Ok(r)
}

/// Whether an `If-Match` / `If-None-Match` list (`"etag", W/"etag"`, or
/// `*`) names `etag`.
fn etag_listed(list: &str, etag: &str) -> bool {
    list.split(',').map(|t| t.trim().trim_start_matches("W/").trim_matches('"')).any(|t| t == "*" || t == etag)
}

/// GetObject's and HeadObject's conditions, as S3: `If-Match` naming
/// another ETag is 412 PreconditionFailed (s3transfer sends it on each
/// ranged GET of a download, so a changed object fails the download rather
/// than mixing versions); `If-None-Match` naming this one is 304 Not
/// Modified (the `Some` answer). The date conditions are not checked.
fn preconditions(h: &Headers, meta: &ObjectMeta) -> Result<Option<Response<Body>>, ErrorReply> {
    if let Some(m) = header(h, "if-match")
        && !etag_listed(m, &meta.etag)
    {
        return Err(ErrorReply::new(
            412,
            "PreconditionFailed",
            format!("If-Match: {m} does not name the object's ETag \"{}\"", meta.etag),
        ));
    }
    if let Some(m) = header(h, "if-none-match")
        && etag_listed(m, &meta.etag)
    {
        return Ok(Some(respond(304, object_headers(meta), String::new())));
    }
    Ok(None)
}

/// The value of header `name` (case-insensitive), if present once.
fn header<'a>(h: &'a Headers, name: &str) -> Option<&'a str> {
    h.0.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
}

/// A decimal header, or a 400 naming it.
fn number_header(h: &Headers, name: &str) -> Result<Option<u64>, ErrorReply> {
    header(h, name)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|_| {
                ErrorReply::new(400, "InvalidArgument", format!("{name}: must be a decimal number of bytes"))
            })
        })
        .transpose()
}

/// S3 PutObject (`PUT /bucket/key`) and UploadPart (`PUT
/// /bucket/key?partNumber=N&uploadId=U`, of an upload that exists): the
/// body, plain or `aws-chunked` (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`),
/// streams to the store's temporary file; the object (or part) appears
/// only once all of it arrived, within the size limit and matching the
/// signed SHA-256. Anything else stores nothing and leaves nothing behind.
pub(super) async fn put_object(gw: &Gateway, uri: &str, h: &Headers, payload: Payload, body: Incoming) -> super::Reply {
    if header(h, "x-amz-copy-source").is_some() {
        return Err(ErrorReply::new(501, "NotImplemented", "x-amz-copy-source: CopyObject is not served"));
    }
    let p = ObjectPath::from_target(uri).map_err(object_path_error)?;
    let chunked = payload == Payload::ChunkedUnsignedTrailer;
    let declared = if chunked {
        Some(number_header(h, "x-amz-decoded-content-length")?.ok_or_else(|| {
            ErrorReply::new(
                411,
                "MissingContentLength",
                "x-amz-decoded-content-length: required with STREAMING-UNSIGNED-PAYLOAD-TRAILER",
            )
        })?)
    } else {
        None
    };
    let limit = gw.opts.max_object_size;
    let length = if chunked { declared } else { number_header(h, "content-length")? };
    if length.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    if let Some(part) = &p.part {
        let store = gw.store.clone();
        let (obj, id) = (ObjectPath { part: None, ..p.clone() }, part.upload_id.clone());
        let known = blocking(move || store.has_upload(&obj, &id)).await?;
        if !known {
            return Err(StoreError::NoSuchUpload(part.upload_id.clone()).into());
        }
    }
    let expect = Expect {
        length: declared,
        sha256: match payload {
            Payload::Sha256(s) => Some(s),
            _ => None,
        },
        crc32: header(h, "x-amz-checksum-crc32").map(parse_crc32).transpose()?,
        trailers: chunked.then(Trailers::default),
    };
    let verdict = Verdict::default();
    let (tx, reader) = BodyReader::new();
    let store = gw.store.clone();
    let v = verdict.clone();
    let stored = tokio::task::spawn_blocking(move || -> Result<ObjectMeta, StoreError> {
        match expect.trailers.clone() {
            Some(t) => {
                let chunks = AwsChunked::new(reader, v.clone(), t);
                store.put_stream(&p, &mut Checked::new(chunks, limit, expect, v))
            }
            None => store.put_stream(&p, &mut Checked::new(reader, limit, expect, v)),
        }
    });
    pump(body, tx, verdict.clone()).await;
    let stored = match stored.await {
        Ok(r) => r,
        Err(_) => return Err(ErrorReply::new(500, "InternalError", "the backend task failed")),
    };
    match stored {
        Ok(meta) => Ok(object_headers(&meta)),
        // A failure of the body itself says so; a store failure as the store's.
        Err(e) => Err(verdict.take().unwrap_or_else(|| e.into())),
    }
}

/// One `Range: bytes=...` of an object of `len` bytes, as S3 reads it:
/// `a-b` (b past the end is the end), `a-`, `-n` (the last n bytes, all of
/// them when n is past the start). `Ok(None)`: no header. A range that
/// starts at or past the end, `-0`, or any range of an empty object is
/// unsatisfiable (416 InvalidRange); a malformed header, or several
/// ranges, is refused with 400 naming the rule.
pub(super) fn parse_range(value: Option<&str>, len: u64) -> Result<Option<(u64, u64)>, RangeError> {
    let Some(v) = value else { return Ok(None) };
    let bad = |rule: &'static str| RangeError::Malformed(rule);
    let spec = v.trim().strip_prefix("bytes=").ok_or(bad("must start with bytes="))?;
    if spec.contains(',') {
        return Err(bad("only one range is served, not a list"));
    }
    let (a, b) = spec.trim().split_once('-').ok_or(bad("must be bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX"))?;
    let num = |s: &str| -> Result<u64, RangeError> {
        if s.is_empty() || s.len() > 20 || !s.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad("positions must be decimal numbers"));
        }
        s.parse::<u64>().map_err(|_| bad("positions must be decimal numbers"))
    };
    let (a, b) = (a.trim(), b.trim());
    let (first, last) = match (a.is_empty(), b.is_empty()) {
        (true, true) => return Err(bad("must be bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX")),
        (true, false) => {
            let n = num(b)?;
            if n == 0 || len == 0 {
                return Err(RangeError::Unsatisfiable);
            }
            (len - n.min(len), len - 1)
        }
        (false, true) => (num(a)?, u64::MAX),
        (false, false) => {
            let (first, last) = (num(a)?, num(b)?);
            if last < first {
                return Err(bad("the last position is before the first"));
            }
            (first, last)
        }
    };
    if first >= len {
        return Err(RangeError::Unsatisfiable);
    }
    Ok(Some((first, last.min(len - 1) - first + 1)))
}

/// Why a `Range` header is not served.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RangeError {
    /// Malformed (the rule it broke): 400.
    Malformed(&'static str),
    /// Starts past the end: 416 InvalidRange.
    Unsatisfiable,
}

/// Bytes read from the store per response chunk.
const GET_CHUNK: u64 = 1 << 20;

/// S3 GetObject (`GET /bucket/key`, `?partNumber=N`, and one `Range`):
/// 200 with the object, or 206 with `Content-Range` for a range or a part
/// (with `x-amz-mp-parts-count`); ETag, version id, Content-Length and
/// `Accept-Ranges`. The data streams from the store in 1 MiB reads, each
/// checked to be of the same version: an object replaced mid-answer cuts
/// the answer off (the client sees a short body, never a mix).
pub(super) async fn get_object(
    gw: &Gateway,
    path: &str,
    query: Option<&str>,
    h: &Headers,
) -> Result<Response<Body>, ErrorReply> {
    let target = match query {
        None => path.to_string(),
        Some(q) => format!("{path}?{q}"),
    };
    let resource = path;
    let t = ObjectPath::from_prepare_target(Op::Get, &target, gw.opts.max_part_number).map_err(object_path_error)?;
    let range = header(h, "range");
    if t.get_part.is_some() && range.is_some() {
        return Err(ErrorReply::new(
            400,
            "InvalidRequest",
            "Range and partNumber: a GET takes one of them, not both (as S3)",
        ));
    }
    let store = gw.store.clone();
    let (path, part) = (t.path, t.get_part);
    let p = path.clone();
    // The object (or part): its meta, size, and where the part starts.
    let (meta, len, parts, start) = blocking(move || match part {
        Some(n) => store.head_part(&p, n).map(|m| (m.object, m.size, Some(m.parts), m.start)),
        None => store.head(&p).map(|m| (m.clone(), m.size, None, 0)),
    })
    .await?;
    if let Some(r) = preconditions(h, &meta)? {
        return Ok(r);
    }
    let (offset, size, status) = match parse_range(range, len) {
        Ok(None) => (0, len, if parts.is_some() { 206 } else { 200 }),
        Ok(Some((o, n))) => (o, n, 206),
        Err(RangeError::Unsatisfiable) => {
            let e = ErrorReply::new(
                416,
                "InvalidRange",
                format!("Range: {:?} is not satisfiable: the object has {len} bytes", range.unwrap_or("")),
            );
            let mut r = super::error(e, resource);
            if let Ok(v) = hyper::header::HeaderValue::from_str(&format!("bytes */{len}")) {
                r.headers_mut().insert(hyper::header::CONTENT_RANGE, v);
            }
            return Ok(r);
        }
        Err(RangeError::Malformed(rule)) => {
            return Err(ErrorReply::new(400, "InvalidArgument", format!("Range: {rule}")));
        }
    };
    let mut headers = object_headers(&meta);
    headers.push(("accept-ranges", "bytes".into()));
    headers.push(("content-type", "application/octet-stream".into()));
    if status == 206 {
        // A part's range is its place in the whole object (as S3 answers).
        let (first, total) = (start + offset, meta.size);
        let range =
            if size == 0 { format!("bytes */{total}") } else { format!("bytes {first}-{}/{total}", first + size - 1) };
        headers.push(("content-range", range));
    }
    if let Some(n) = parts {
        headers.push(("x-amz-mp-parts-count", n.to_string()));
    }
    let (tx, body) = ChannelBody::new(size);
    let store = gw.store.clone();
    let version = meta.version_id.clone();
    tokio::task::spawn_blocking(move || stream_out(&*store, &path, part, offset, size, &version, &tx));
    let mut r = Response::new(http_body_util::BodyExt::boxed(body));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    for (k, v) in headers {
        if let Ok(v) = hyper::header::HeaderValue::from_str(&v) {
            r.headers_mut().insert(k, v);
        }
    }
    r.headers_mut().insert(hyper::header::CONTENT_LENGTH, hyper::header::HeaderValue::from(size));
    Ok(r)
}

/// Reads `size` bytes at `offset` of the object (or of part `part`) into
/// `tx` in chunks; stops when the client is gone, and sends an error (the
/// answer is cut off) when a read fails or the object changed version.
fn stream_out(
    store: &dyn ObjectStore,
    path: &ObjectPath,
    part: Option<u32>,
    mut offset: u64,
    size: u64,
    version: &str,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let end = offset + size;
    while offset < end {
        let n = (end - offset).min(GET_CHUNK);
        let mut buf = vec![0u8; n as usize];
        let read = match part {
            Some(p) => store.read_part(path, p, offset, &mut buf).map(|m| m.object),
            None => store.read_range(path, offset, &mut buf),
        };
        let chunk = match read {
            Ok(m) if m.version_id == version => Ok(Bytes::from(buf)),
            Ok(_) => Err(std::io::Error::other("the object was replaced while it was being read")),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        };
        let failed = chunk.is_err();
        if tx.blocking_send(chunk).is_err() || failed {
            return;
        }
        offset += n;
    }
}

/// S3 DeleteObject: 204, also when there was no such object (as S3).
pub(super) async fn delete_object(gw: &Gateway, path: &str, query: Option<&str>) -> Result<Response<Body>, ErrorReply> {
    if let Some(q) = query {
        return Err(ErrorReply::new(
            400,
            "InvalidArgument",
            format!("query {q:?}: DeleteObject takes no query (uploadId aborts an upload)"),
        ));
    }
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    let store = gw.store.clone();
    match blocking(move || store.delete(&p)).await {
        Ok(()) | Err(ErrorReply { code: "NoSuchKey", .. }) => Ok(respond(204, Vec::new(), String::new())),
        Err(e) => Err(e),
    }
}

/// `uploadId` of a multipart route's query (required, checked by the part
/// rules), and the object path.
fn upload_target(path: &str, query: Option<&str>) -> Result<(ObjectPath, String), ErrorReply> {
    let q = query.unwrap_or("");
    let id = query_param(q, "uploadId")?
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ErrorReply::new(400, "InvalidArgument", "uploadId: required, and must not be empty"))?;
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    // The part rules check the id (charset, length).
    ObjectPath { part: Some(crate::store::Part { number: 1, upload_id: id.clone() }), ..p.clone() }
        .check()
        .map_err(object_path_error)?;
    Ok((p, id))
}

/// S3 CreateMultipartUpload (`POST /bucket/key?uploads`): a new upload id.
pub(super) async fn create_upload(gw: &Gateway, path: &str, query: Option<&str>) -> Result<String, ErrorReply> {
    let q = query.unwrap_or("");
    if let Some(k) = q.split('&').map(|p| p.split_once('=').map_or(p, |(k, _)| k)).find(|k| *k != "uploads") {
        return Err(ErrorReply::new(
            400,
            "InvalidArgument",
            format!("query key {k:?}: CreateMultipartUpload takes only ?uploads"),
        ));
    }
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    let store = gw.store.clone();
    let (bucket, key) = (p.bucket.clone(), p.key.clone());
    let id = blocking(move || store.create_upload(&p)).await?;
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<InitiateMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId></InitiateMultipartUploadResult>",
        xml_escape(&bucket),
        xml_escape(&key),
        xml_escape(&id)
    ))
}

/// S3 AbortMultipartUpload (`DELETE /bucket/key?uploadId=U`): the upload
/// and its parts go; 204; an unknown upload is 404 NoSuchUpload.
pub(super) async fn abort_upload(gw: &Gateway, path: &str, query: Option<&str>) -> Result<Response<Body>, ErrorReply> {
    let (p, id) = upload_target(path, query)?;
    let store = gw.store.clone();
    blocking(move || store.abort_upload(&p, &id)).await?;
    Ok(respond(204, Vec::new(), String::new()))
}

/// Most parts one ListParts answer names (S3's default and maximum).
pub const MAX_PARTS_LISTED: usize = 1000;

/// S3 ListParts (`GET /bucket/key?uploadId=U[&part-number-marker=N][&max-parts=M]`):
/// the parts uploaded so far, by number, after the marker.
pub(super) async fn list_parts(gw: &Gateway, path: &str, query: Option<&str>) -> Result<String, ErrorReply> {
    let (p, id) = upload_target(path, query)?;
    let q = query.unwrap_or("");
    let marker = match query_param(q, "part-number-marker")? {
        None => 0,
        Some(m) => m.parse::<u32>().map_err(|_| {
            ErrorReply::new(400, "InvalidArgument", "part-number-marker: must be a decimal part number")
        })?,
    };
    let max = match query_param(q, "max-parts")? {
        None => MAX_PARTS_LISTED,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|m| *m <= MAX_PARTS_LISTED)
            .ok_or_else(|| ErrorReply::new(400, "InvalidArgument", "max-parts: must be 0..=1000"))?,
    };
    let store = gw.store.clone();
    let (bucket, key, upload) = (p.bucket.clone(), p.key.clone(), id.clone());
    let parts = blocking(move || store.list_parts(&p, &id)).await?;
    let after: Vec<_> = parts.into_iter().filter(|(n, _)| *n > marker).collect();
    let truncated = after.len() > max;
    let shown = &after[..after.len().min(max)];
    let next = shown.last().map_or(marker, |(n, _)| *n);
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListPartsResult><Bucket>{}</Bucket><Key>{}</Key><UploadId>{}</UploadId><PartNumberMarker>{marker}</PartNumberMarker><NextPartNumberMarker>{next}</NextPartNumberMarker><MaxParts>{max}</MaxParts><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(&bucket),
        xml_escape(&key),
        xml_escape(&upload)
    );
    for (n, m) in shown {
        x.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber>{}<ETag>&quot;{}&quot;</ETag><Size>{}</Size></Part>",
            last_modified_xml(m),
            m.etag,
            m.size
        ));
    }
    x.push_str("</ListPartsResult>");
    Ok(x)
}

/// Most keys one listing returns (S3's default and maximum).
pub const MAX_KEYS: usize = 1000;

fn query_param(query: &str, name: &str) -> Result<Option<String>, ErrorReply> {
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == name {
            return percent_encoding::percent_decode_str(v).decode_utf8().map(|v| Some(v.into_owned())).map_err(|_| {
                ErrorReply::new(400, "InvalidArgument", format!("{name}: not UTF-8 after percent-decoding"))
            });
        }
    }
    Ok(None)
}

/// How many keys a listing with a delimiter scans at most (the keys under
/// one common prefix all count, as the store lists keys, not prefixes).
pub const MAX_KEYS_SCANNED: usize = 100_000;

/// S3 ListObjectsV2 (`GET /bucket?list-type=2&prefix=P&max-keys=N[&delimiter=D]`):
/// keys in byte order; with a delimiter, the keys whose rest after the
/// prefix holds it are rolled up into `CommonPrefixes` (max-keys counts
/// both, as S3). No continuation: IsTruncated says more matched.
pub(super) async fn list_objects(gw: &Gateway, bucket: &str, query: &str) -> Result<String, ErrorReply> {
    if query_param(query, "list-type")?.as_deref() != Some("2") {
        return Err(ErrorReply::new(400, "InvalidArgument", "only ListObjectsV2 (list-type=2) is served"));
    }
    let prefix = query_param(query, "prefix")?.unwrap_or_default();
    let delimiter = query_param(query, "delimiter")?.filter(|d| !d.is_empty());
    let max = match query_param(query, "max-keys")? {
        None => MAX_KEYS,
        Some(m) => m
            .parse::<usize>()
            .ok()
            .filter(|m| *m <= MAX_KEYS)
            .ok_or_else(|| ErrorReply::new(400, "InvalidArgument", "max-keys: must be 0..=1000"))?,
    };
    let store = gw.store.clone();
    let (b, pfx) = (bucket.to_string(), prefix.clone());
    let scan = if delimiter.is_some() { MAX_KEYS_SCANNED } else { max };
    let (list, scan_truncated) = blocking(move || store.list(&b, &pfx, scan)).await.map_err(|e| {
        if e.code == "InvalidRdmaRequest" { ErrorReply::new(400, "InvalidBucketName", e.message) } else { e }
    })?;
    // Objects and common prefixes, in key order, at most `max` of them.
    let mut entries: Vec<Result<crate::store::Listed, String>> = Vec::new();
    let mut truncated = scan_truncated;
    for o in list {
        let rolled = delimiter.as_deref().and_then(|d| {
            let rest = &o.key[prefix.len().min(o.key.len())..];
            rest.find(d).map(|i| format!("{prefix}{}", &rest[..i + d.len()]))
        });
        let entry = match rolled {
            Some(p) if matches!(entries.last(), Some(Err(last)) if *last == p) => continue,
            Some(p) => Err(p),
            None => Ok(o),
        };
        if entries.len() == max {
            truncated = true;
            break;
        }
        entries.push(entry);
    }
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>{}</Name><Prefix>{}</Prefix>{}<KeyCount>{}</KeyCount><MaxKeys>{max}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(bucket),
        xml_escape(&prefix),
        delimiter.as_deref().map(|d| format!("<Delimiter>{}</Delimiter>", xml_escape(d))).unwrap_or_default(),
        entries.len()
    );
    for o in entries.iter().flatten() {
        x.push_str(&format!(
            "<Contents><Key>{}</Key>{}<Size>{}</Size><ETag>&quot;{}&quot;</ETag><VersionId>{}</VersionId></Contents>",
            xml_escape(&o.key),
            last_modified_xml(&o.meta),
            o.meta.size,
            o.meta.etag,
            o.meta.version_id
        ));
    }
    for p in entries.iter().filter_map(|e| e.as_ref().err()) {
        x.push_str(&format!("<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>", xml_escape(p)));
    }
    x.push_str("</ListBucketResult>");
    Ok(x)
}

/// The `(PartNumber, ETag)` pairs of a CompleteMultipartUpload body.
fn parse_complete(body: &[u8]) -> Result<Vec<(u32, Option<String>)>, ErrorReply> {
    let bad = |m: &str| ErrorReply::new(400, "MalformedXML", m.to_string());
    let text = std::str::from_utf8(body).map_err(|_| bad("the body is not UTF-8"))?;
    if !text.contains("<CompleteMultipartUpload") {
        return Err(bad("the body must be a CompleteMultipartUpload"));
    }
    let field = |part: &str, tag: &str| -> Option<String> {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        let start = part.find(&open)? + open.len();
        let end = part[start..].find(&close)? + start;
        Some(part[start..end].trim().to_string())
    };
    let mut parts = Vec::new();
    for chunk in text.split("<Part>").skip(1) {
        let part = chunk.split("</Part>").next().unwrap_or("");
        let n = field(part, "PartNumber")
            .and_then(|n| n.parse::<u32>().ok())
            .ok_or_else(|| bad("each Part needs a decimal PartNumber"))?;
        let etag = field(part, "ETag").map(|e| e.replace("&quot;", "\"").trim_matches('"').to_string());
        parts.push((n, etag));
    }
    Ok(parts)
}

/// S3 CompleteMultipartUpload (`POST /bucket/key?uploadId=U`) of parts
/// stored through UploadPart or PREPARE's part-upload targets: each listed
/// part must exist and, when the list gives its ETag, match it
/// (400 InvalidPart), the numbers must ascend (400 InvalidPartOrder), the
/// upload must exist (404 NoSuchUpload). The object's ETag is the MD5 of
/// its whole data (as a single PUT's), not S3's "md5-of-md5s-N".
pub(super) async fn complete_upload(
    gw: &Gateway,
    path: &str,
    query: Option<&str>,
    body: &[u8],
) -> Result<String, ErrorReply> {
    let (p, upload) = upload_target(path, query)?;
    let parts = parse_complete(body)?;
    let store = gw.store.clone();
    let (bucket, key) = (p.bucket.clone(), p.key.clone());
    let meta = blocking(move || store.complete_upload(&p, &upload, &parts)).await.map_err(|e| {
        if e.code == "InvalidRdmaRequest" {
            let message = e.message.trim_start_matches("x-amz-rdma-target: ").to_string();
            let code = if message.contains("ascending") { "InvalidPartOrder" } else { "InvalidPart" };
            ErrorReply::new(400, code, message)
        } else {
            e
        }
    })?;
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><ETag>&quot;{}&quot;</ETag><VersionId>{}</VersionId></CompleteMultipartUploadResult>",
        xml_escape(&bucket),
        xml_escape(&key),
        meta.etag,
        meta.version_id
    ))
}

fn object_headers(meta: &ObjectMeta) -> Vec<(&'static str, String)> {
    let mut h = vec![("etag", format!("\"{}\"", meta.etag)), ("x-amz-version-id", meta.version_id.clone())];
    if let Some(t) = meta.last_modified.and_then(http_date) {
        h.push(("last-modified", t));
    }
    h
}

/// An HTTP date (`Sun, 06 Dec 2026 15:40:56 GMT`), as Last-Modified.
pub(super) fn http_date(t: std::time::SystemTime) -> Option<String> {
    let fmt = time::macros::format_description!(
        "[weekday repr:short], [day] [month repr:short] [year] [hour]:[minute]:[second] GMT"
    );
    time::OffsetDateTime::from(t).format(&fmt).ok()
}

/// An ISO 8601 time (`2026-12-06T15:40:56.123Z`), as a listing's LastModified.
pub(super) fn iso_date(t: std::time::SystemTime) -> Option<String> {
    let fmt = time::macros::format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");
    time::OffsetDateTime::from(t).format(&fmt).ok()
}

/// `<LastModified>..</LastModified>` when the store keeps the time.
fn last_modified_xml(meta: &ObjectMeta) -> String {
    meta.last_modified.and_then(iso_date).map(|t| format!("<LastModified>{t}</LastModified>")).unwrap_or_default()
}

fn object_path_error(e: StoreError) -> ErrorReply {
    match e {
        StoreError::BadBucket(_) | StoreError::BadKey(_) | StoreError::BadPart(_) | StoreError::BadQuery { .. } => {
            ErrorReply::new(400, "InvalidArgument", e.to_string())
        }
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{RangeError, parse_range};

    #[test]
    fn ranges_by_the_table() {
        let r = |s: &str, len| parse_range(Some(s), len);
        assert_eq!(r("bytes=0-0", 10), Ok(Some((0, 1))));
        assert_eq!(r("bytes=3-", 10), Ok(Some((3, 7))));
        assert_eq!(r("bytes=-3", 10), Ok(Some((7, 3))));
        assert_eq!(r("bytes=-30", 10), Ok(Some((0, 10))));
        assert_eq!(r("bytes=8-30", 10), Ok(Some((8, 2))));
        assert_eq!(r("bytes=10-", 10), Err(RangeError::Unsatisfiable));
        assert_eq!(r("bytes=-0", 10), Err(RangeError::Unsatisfiable));
        assert_eq!(r("bytes=0-", 0), Err(RangeError::Unsatisfiable));
        assert_eq!(r(&format!("bytes={}-", u64::MAX), 10), Err(RangeError::Unsatisfiable));
        assert_eq!(r(&format!("bytes=-{}", u64::MAX), 10), Ok(Some((0, 10))));
        assert!(matches!(r("bytes=4-3", 10), Err(RangeError::Malformed(_))));
        assert_eq!(parse_range(None, 10), Ok(None));
    }

    proptest! {
        /// Any header, any length: no panic, and a served range lies
        /// within the object and is not empty.
        #[test]
        fn any_range_header_is_answered_within_the_object(
            s in "bytes=[0-9]{0,4}-[0-9]{0,4}|(bytes=)?[0-9 ,-]{0,30}|\\PC{0,20}",
            len in 0u64..10_000,
        ) {
            if let Ok(Some((offset, size))) = parse_range(Some(&s), len) {
                prop_assert!(size >= 1 && offset + size <= len, "{s:?} of {len}: {offset}+{size}");
            }
        }

        /// `bytes=A-B` within the object is exactly A..=B.
        #[test]
        fn a_range_inside_the_object_is_exact(a in 0u64..1000, n in 0u64..1000, extra in 1u64..1000) {
            let len = a + n + extra;
            prop_assert_eq!(parse_range(Some(&format!("bytes={a}-{}", a + n)), len), Ok(Some((a, n + 1))));
        }
    }
}

//! The S3 object routes beside the control plane: HeadObject (with
//! `?partNumber=N`, the GetPart rules), PutObject of at most
//! [`MAX_BODY`](super::MAX_BODY) bytes, DeleteObject, ListObjectsV2 and
//! CompleteMultipartUpload. Paths are decoded by the same target rules as
//! PREPARE's.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use rctb_core::rcsession::Op;

use super::{ErrorReply, Gateway, blocking, respond, xml_escape};
use crate::store::{ObjectMeta, ObjectPath, StoreError};

/// S3 HeadObject: size, ETag and version id (a client learns a GET's size
/// here). With `?partNumber=N` (the GetPart rules): the part's size as
/// Content-Length and `x-amz-mp-parts-count`, as S3 answers.
pub(super) async fn head_object(
    gw: &Gateway,
    path: &str,
    query: Option<&str>,
) -> Result<Response<Full<Bytes>>, ErrorReply> {
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
    let mut headers = object_headers(&meta);
    if let Some(n) = parts {
        headers.push(("x-amz-mp-parts-count", n.to_string()));
    }
    let mut r = respond(200, headers, String::new());
    r.headers_mut().insert(hyper::header::CONTENT_LENGTH, hyper::header::HeaderValue::from(len));
    Ok(r)
}

/// S3 PutObject with the data in the body, at most [`MAX_BODY`] bytes: the
/// way to store an empty object (an RDMA session moves 1 byte or more).
pub(super) async fn put_object(gw: &Gateway, path: &str, body: Bytes) -> super::Reply {
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    let store = gw.store.clone();
    let meta = blocking(move || store.put(&p, &body)).await?;
    Ok(object_headers(&meta))
}

/// S3 DeleteObject: 204, also when there was no such object (as S3).
pub(super) async fn delete_object(gw: &Gateway, path: &str) -> Result<(), ErrorReply> {
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    let store = gw.store.clone();
    match blocking(move || store.delete(&p)).await {
        Ok(()) => Ok(()),
        Err(e) if e.code == "NoSuchKey" => Ok(()),
        Err(e) => Err(e),
    }
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

/// S3 ListObjectsV2 (`GET /bucket?list-type=2&prefix=P&max-keys=N`): keys
/// in byte order, no delimiter, no continuation (IsTruncated says more
/// matched).
pub(super) async fn list_objects(gw: &Gateway, bucket: &str, query: &str) -> Result<String, ErrorReply> {
    if query_param(query, "list-type")?.as_deref() != Some("2") {
        return Err(ErrorReply::new(400, "InvalidArgument", "only ListObjectsV2 (list-type=2) is served"));
    }
    let prefix = query_param(query, "prefix")?.unwrap_or_default();
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
    let (list, truncated) = blocking(move || store.list(&b, &pfx, max)).await.map_err(|e| {
        if e.code == "InvalidRdmaRequest" { ErrorReply::new(400, "InvalidBucketName", e.message) } else { e }
    })?;
    let mut x = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>{}</Name><Prefix>{}</Prefix><KeyCount>{}</KeyCount><MaxKeys>{max}</MaxKeys><IsTruncated>{truncated}</IsTruncated>",
        xml_escape(bucket),
        xml_escape(&prefix),
        list.len()
    );
    for o in list {
        x.push_str(&format!(
            "<Contents><Key>{}</Key><Size>{}</Size><ETag>&quot;{}&quot;</ETag><VersionId>{}</VersionId></Contents>",
            xml_escape(&o.key),
            o.meta.size,
            o.meta.etag,
            o.meta.version_id
        ));
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
/// stored through PREPARE's part-upload targets. The object's ETag is the
/// MD5 of its whole data (as a single PUT's), not S3's "md5-of-md5s-N".
pub(super) async fn complete_upload(gw: &Gateway, path: &str, upload: &str, body: &[u8]) -> Result<String, ErrorReply> {
    let p = ObjectPath::from_target(path).map_err(object_path_error)?;
    let parts = parse_complete(body)?;
    let store = gw.store.clone();
    let upload = percent_encoding::percent_decode_str(upload).decode_utf8_lossy().into_owned();
    let (bucket, key) = (p.bucket.clone(), p.key.clone());
    let meta = blocking(move || store.complete_upload(&p, &upload, &parts))
        .await
        .map_err(|e| if e.code == "InvalidRdmaRequest" { ErrorReply::new(400, "InvalidPart", e.message) } else { e })?;
    Ok(format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<CompleteMultipartUploadResult><Bucket>{}</Bucket><Key>{}</Key><ETag>&quot;{}&quot;</ETag><VersionId>{}</VersionId></CompleteMultipartUploadResult>",
        xml_escape(&bucket),
        xml_escape(&key),
        meta.etag,
        meta.version_id
    ))
}

fn object_headers(meta: &ObjectMeta) -> Vec<(&'static str, String)> {
    vec![("etag", format!("\"{}\"", meta.etag)), ("x-amz-version-id", meta.version_id.clone())]
}

fn object_path_error(e: StoreError) -> ErrorReply {
    match e {
        StoreError::BadBucket(_) | StoreError::BadKey(_) | StoreError::BadPart(_) | StoreError::BadQuery { .. } => {
            ErrorReply::new(400, "InvalidArgument", e.to_string())
        }
        other => other.into(),
    }
}

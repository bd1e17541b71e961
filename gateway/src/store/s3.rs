//! `S3Store` (feature `s3`): the gateway's objects in one bucket of an S3 server
//! (SeaweedFS, Ceph RGW, AWS), through the `object_store` crate.
//!
//! Layout in the backend bucket: object `key` of gateway bucket `bk` is
//! the S3 object `bk/key`, readable by any S3 client. The store's own
//! state lives under `.rctb/` (no gateway bucket can start with `.`, so no
//! object can collide with it):
//!
//! - `.rctb/uploads/H/ID/upload`: the marker of upload `ID` of the object
//!   whose bucket and key hash to `H` (SHA-256, 32 hex), and
//!   `.rctb/uploads/H/ID/part-NNNNN` its parts, each a plain S3 object.
//!   The gateway's upload ids are the store's own (S3's multipart uploads
//!   are not used for them), so client-chosen ids and parts of any size work
//!   as on [`FsStore`](super::FsStore).
//! - `.rctb/parts/H/VERSION`: the part sizes of a multipart object (the
//!   version it names), written before the object, read by GetPart.
//!
//! Each object carries `x-amz-meta-rctb-etag` (the MD5 of its data, as
//! FsStore's ETag), `x-amz-meta-rctb-version` (a random 32-hex version id)
//! and, for one completed from an upload, `x-amz-meta-rctb-parts`. A PUT is
//! one S3 PUT (atomic); a completion is one PUT, or an S3 multipart upload
//! completed at the end for more than [`BUFFER_LIMIT`] bytes (atomic too).
//!
//! The trait is blocking and is called from `spawn_blocking` threads: the
//! store runs its requests on a runtime of its own and waits on a channel,
//! so it neither needs nor blocks the caller's runtime (no deadlock, no
//! "runtime within a runtime" panic).

//!
//! [`S3Options`] (what `--store s3://BUCKET --endpoint URL` says) is here in
//! every build; the store itself needs the `s3` feature.

use std::time::Duration;

use super::StoreError;

/// A completion of at most this many bytes is collected in memory and
/// stored with one PUT; a larger one goes up as an S3 multipart upload. A
/// streamed PUT past it is spooled to a temporary file.
pub const BUFFER_LIMIT: u64 = 32 << 20;
/// Longest S3 key (bucket prefix included).
pub const MAX_S3_KEY_LEN: usize = 1024;

#[cfg(feature = "s3")]
mod client;
#[cfg(feature = "s3")]
pub use client::S3Store;

/// How to reach the S3 server, and how long to insist.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct S3Options {
    /// The backend bucket (must exist).
    pub bucket: String,
    /// The server's URL (`http://127.0.0.1:8333`); `None` is AWS.
    pub endpoint: Option<String>,
    /// Retries of a failed request (5xx, timeout, connection error).
    pub max_retries: usize,
    /// No retry starts later than this after the first attempt.
    pub retry_timeout: Duration,
    /// One request, its body included, may take this long.
    pub request_timeout: Duration,
    /// Connecting may take this long.
    pub connect_timeout: Duration,
    /// The access key id and secret ([`S3Options::from_url`] takes them
    /// from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`). Required with
    /// an endpoint; without one (AWS) the SDK's chain (instance metadata,
    /// ...) is tried.
    pub credentials: Option<(String, String)>,
}

impl S3Options {
    /// Defaults: 3 retries, none starting later than 10 s after the first
    /// attempt, 10 s per request, 3 s to connect (a stalled store answers
    /// the gateway's client in about 20 s at most).
    pub fn new(bucket: impl Into<String>, endpoint: Option<String>) -> Self {
        S3Options {
            bucket: bucket.into(),
            endpoint,
            max_retries: 3,
            retry_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            credentials: None,
        }
    }

    /// Parses `s3://BUCKET` (the `--store` value) into options, with the
    /// credentials of the environment.
    pub fn from_url(url: &str, endpoint: Option<String>) -> Result<Self, StoreError> {
        let bad = |rule| StoreError::BadStore { field: "--store", rule };
        let bucket = url.strip_prefix("s3://").ok_or(bad("must be s3://BUCKET"))?;
        let bucket = bucket.strip_suffix('/').unwrap_or(bucket);
        if bucket.len() < 3 || bucket.len() > 63 {
            return Err(bad("the bucket must be 3..=63 bytes (S3's rule)"));
        }
        if !bucket.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.')
            || !bucket.as_bytes()[0].is_ascii_alphanumeric()
        {
            return Err(bad(
                "the bucket takes lowercase letters, digits, '-' and '.', starting with a letter or digit",
            ));
        }
        if let Some(e) = &endpoint
            && !(e.starts_with("http://") || e.starts_with("https://"))
        {
            return Err(StoreError::BadStore { field: "--endpoint", rule: "must be an http:// or https:// URL" });
        }
        let has_endpoint = endpoint.is_some();
        let mut o = S3Options::new(bucket, endpoint);
        o.credentials = match (std::env::var("AWS_ACCESS_KEY_ID"), std::env::var("AWS_SECRET_ACCESS_KEY")) {
            (Ok(k), Ok(s)) if !k.is_empty() && !s.is_empty() => Some((k, s)),
            _ if has_endpoint => {
                return Err(StoreError::BadStore {
                    field: "AWS_ACCESS_KEY_ID",
                    rule: "must be set, with AWS_SECRET_ACCESS_KEY, for an S3 store at --endpoint",
                });
            }
            _ => None,
        };
        Ok(o)
    }
}

//! Principals and AWS SigV4 (header form) for the control plane.
//!
//! Verification recomputes the signature with the `aws-sigv4` crate over
//! exactly the headers the request says it signed (S3 settings: single
//! percent-encoding, no path normalisation), then compares in constant
//! time. The scope must be `<date>/<region>/s3/aws4_request` with the date
//! of `x-amz-date`, and `x-amz-date` must be within 15 minutes of the
//! server's clock. Our client signs with the same crate ([`sign`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings, UriPathNormalizationMode,
    sign as sigv4_sign,
};
use aws_sigv4::sign::v4;
use rctb_core::wire::hipobj::PrincipalId;
use serde::Deserialize;
use subtle::ConstantTimeEq;
use thiserror::Error;

/// Requests more than this far from the server clock are refused (S3's
/// RequestTimeTooSkewed).
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);
/// The SigV4 service name.
pub const SERVICE: &str = "s3";

/// The server's clock, injected so tests are deterministic.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The wall clock: the one place the gateway reads it, for SigV4's skew
/// check and for signing (a signature carries its time).
pub fn wall_clock() -> Clock {
    #[allow(clippy::disallowed_methods)] // SigV4 is defined against wall-clock time.
    fn now() -> SystemTime {
        SystemTime::now()
    }
    Arc::new(now)
}

/// One user: credentials and whether it may list sessions.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// The SigV4 access key id.
    pub access_key: String,
    /// Its secret key.
    pub secret_key: String,
    /// May list every principal's sessions.
    #[serde(default)]
    pub admin: bool,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("User").field("access_key", &self.access_key).field("admin", &self.admin).finish()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UsersFile {
    #[serde(default)]
    user: Vec<User>,
}

/// Why a users file or the environment gives no users.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum UsersError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The users file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML of `[[user]]` tables.
    #[error("{path}: {source}")]
    Toml {
        /// The users file.
        path: String,
        /// What the parser said (line and column).
        source: Box<toml::de::Error>,
    },
    /// The file has no user.
    #[error("{path}: no [[user]] table")]
    Empty {
        /// The users file.
        path: String,
    },
    /// Two users with one access key.
    #[error("{path}: access key {key:?} appears twice")]
    Duplicate {
        /// The users file.
        path: String,
        /// The key.
        key: String,
    },
    /// A user with an empty key.
    #[error("{path}: user {index}: access_key and secret_key must be non-empty")]
    Blank {
        /// The users file.
        path: String,
        /// The user's place in it (0-based).
        index: usize,
    },
    /// Neither a file nor the environment names a user.
    #[error("no --users file and AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not both set")]
    NoEnv,
}

/// The known users, by access key.
#[derive(Clone, Debug, Default)]
pub struct Users {
    by_key: BTreeMap<String, User>,
}

impl Users {
    /// These users.
    pub fn new(users: impl IntoIterator<Item = User>) -> Self {
        Users { by_key: users.into_iter().map(|u| (u.access_key.clone(), u)).collect() }
    }

    /// Parses a users file: `[[user]]` tables with `access_key`,
    /// `secret_key` and `admin` (default false).
    pub fn parse(path: &str, text: &str) -> Result<Self, UsersError> {
        let f: UsersFile =
            toml::from_str(text).map_err(|e| UsersError::Toml { path: path.to_string(), source: Box::new(e) })?;
        if f.user.is_empty() {
            return Err(UsersError::Empty { path: path.to_string() });
        }
        let mut by_key = BTreeMap::new();
        for (index, u) in f.user.into_iter().enumerate() {
            if u.access_key.is_empty() || u.secret_key.is_empty() {
                return Err(UsersError::Blank { path: path.to_string(), index });
            }
            if by_key.contains_key(&u.access_key) {
                return Err(UsersError::Duplicate { path: path.to_string(), key: u.access_key });
            }
            by_key.insert(u.access_key.clone(), u);
        }
        Ok(Users { by_key })
    }

    /// Reads and parses the users file at `path`.
    pub fn load(path: &Path) -> Result<Self, UsersError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| UsersError::Read { path: p.clone(), source })?;
        Self::parse(&p, &text)
    }

    /// The one admin user of `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY`
    /// (values passed in: the caller reads the environment).
    pub fn from_env(access: Option<String>, secret: Option<String>) -> Result<Self, UsersError> {
        match (access, secret) {
            (Some(a), Some(s)) if !a.is_empty() && !s.is_empty() => {
                Ok(Users::new([User { access_key: a, secret_key: s, admin: true }]))
            }
            _ => Err(UsersError::NoEnv),
        }
    }

    /// The user with `access_key`.
    pub fn get(&self, access_key: &str) -> Option<&User> {
        self.by_key.get(access_key)
    }
}

/// An authenticated requester.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The access key the request was signed with.
    pub access_key: String,
    /// Whether it is an admin.
    pub admin: bool,
    /// Its id in the session server (sessions belong to it).
    pub id: PrincipalId,
}

/// Why a request is not authenticated (HTTP 403).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum AuthError {
    /// No `Authorization` header.
    #[error("missing Authorization header")]
    Missing,
    /// An `Authorization` header that is not SigV4 (what is wrong).
    #[error("Authorization: {0}")]
    Malformed(&'static str),
    /// An access key no user has.
    #[error("the access key is not known")]
    UnknownKey,
    /// A bad `x-amz-date` (what is wrong).
    #[error("x-amz-date: {0}")]
    BadDate(&'static str),
    /// A credential scope of another date, region or service.
    #[error("credential scope: {0}")]
    Scope(&'static str),
    /// Signed more than [`MAX_SKEW`] from the server's clock.
    #[error("the request time is more than 15 minutes from the server's")]
    Skewed,
    /// The body's hash is not the one signed.
    #[error("x-amz-content-sha256 does not match the body")]
    PayloadHash,
    /// A header the signature covers is not in the request.
    #[error("signed header {0:?} is missing from the request")]
    MissingSignedHeader(String),
    /// The signature is wrong (a wrong secret, or a changed request).
    #[error("the signature does not match")]
    Signature,
    /// A signing form the gateway does not serve (which, and what it does).
    #[error("{0}")]
    Unsupported(&'static str),
}

impl AuthError {
    /// The S3 error code.
    pub fn code(&self) -> &'static str {
        match self {
            AuthError::Missing => "AccessDenied",
            AuthError::UnknownKey => "InvalidAccessKeyId",
            AuthError::Skewed => "RequestTimeTooSkewed",
            AuthError::PayloadHash => "XAmzContentSHA256Mismatch",
            AuthError::Signature | AuthError::MissingSignedHeader(_) => "SignatureDoesNotMatch",
            AuthError::Malformed(_) | AuthError::BadDate(_) | AuthError::Scope(_) => "AuthorizationHeaderMalformed",
            AuthError::Unsupported(_) => "NotImplemented",
        }
    }
}

fn s3_settings() -> SigningSettings {
    let mut s = SigningSettings::default();
    s.percent_encoding_mode = PercentEncodingMode::Single;
    s.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
    s.payload_checksum_kind = PayloadChecksumKind::NoHeader;
    s
}

fn sha256_hex(data: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses `x-amz-date` (`YYYYMMDDTHHMMSSZ`).
pub fn parse_amz_date(s: &str) -> Result<SystemTime, AuthError> {
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    let t = time::PrimitiveDateTime::parse(s, &fmt).map_err(|_| AuthError::BadDate("must be YYYYMMDDTHHMMSSZ"))?;
    Ok(t.assume_utc().into())
}

/// Formats a time as `x-amz-date`.
pub fn format_amz_date(t: SystemTime) -> String {
    let fmt = time::macros::format_description!("[year][month][day]T[hour][minute][second]Z");
    time::OffsetDateTime::from(t).format(&fmt).unwrap_or_default()
}

struct AuthHeader<'a> {
    access_key: &'a str,
    date: &'a str,
    region: &'a str,
    service: &'a str,
    signed_headers: Vec<&'a str>,
    signature: &'a str,
}

fn parse_auth(v: &str) -> Result<AuthHeader<'_>, AuthError> {
    let rest =
        v.strip_prefix("AWS4-HMAC-SHA256 ").ok_or(AuthError::Malformed("the algorithm must be AWS4-HMAC-SHA256"))?;
    let (mut cred, mut signed, mut sig) = (None, None, None);
    for part in rest.split(',') {
        let (k, v) = part.trim().split_once('=').ok_or(AuthError::Malformed("parts must be key=value"))?;
        let slot = match k {
            "Credential" => &mut cred,
            "SignedHeaders" => &mut signed,
            "Signature" => &mut sig,
            _ => return Err(AuthError::Malformed("unknown part")),
        };
        if slot.replace(v).is_some() {
            return Err(AuthError::Malformed("a part appears twice"));
        }
    }
    let (Some(cred), Some(signed), Some(signature)) = (cred, signed, sig) else {
        return Err(AuthError::Malformed("needs Credential, SignedHeaders and Signature"));
    };
    let c: Vec<&str> = cred.split('/').collect();
    let [access_key, date, region, service, term] = c[..] else {
        return Err(AuthError::Malformed("Credential must be KEY/DATE/REGION/SERVICE/aws4_request"));
    };
    if term != "aws4_request" {
        return Err(AuthError::Scope("must end with aws4_request"));
    }
    Ok(AuthHeader { access_key, date, region, service, signed_headers: signed.split(';').collect(), signature })
}

/// Verifies a request's SigV4 signature. `headers` are the request's
/// (name, value) pairs, `uri` its path and query as sent.
pub fn verify(
    users: &Users,
    region: &str,
    now: SystemTime,
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Principal, AuthError> {
    verify_with(users, region, now, method, uri, headers, Some(body)).map(|(p, _)| p)
}

/// What a streamed body must still be checked against once it has all
/// arrived (the signature itself is already verified).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Payload {
    /// `x-amz-content-sha256: UNSIGNED-PAYLOAD`: nothing to check.
    Unsigned,
    /// The body's SHA-256 must be this (lowercase hex, as signed).
    Sha256(String),
    /// `STREAMING-UNSIGNED-PAYLOAD-TRAILER`: an `aws-chunked` body whose
    /// chunks are not signed (the checksum trailer comes after the data).
    ChunkedUnsignedTrailer,
}

/// Verifies the signature of a request whose body is streamed: the
/// canonical request uses `x-amz-content-sha256` as sent (required here),
/// and the returned [`Payload`] says what the body must match once read;
/// the caller checks it before storing anything.
/// `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` (signed chunks) is refused.
pub fn verify_streaming(
    users: &Users,
    region: &str,
    now: SystemTime,
    method: &str,
    uri: &str,
    headers: &[(String, String)],
) -> Result<(Principal, Payload), AuthError> {
    verify_with(users, region, now, method, uri, headers, None)
}

fn verify_with(
    users: &Users,
    region: &str,
    now: SystemTime,
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    body: Option<&[u8]>,
) -> Result<(Principal, Payload), AuthError> {
    let header = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
    let auth = parse_auth(header("authorization").ok_or(AuthError::Missing)?)?;
    let user = users.get(auth.access_key).ok_or(AuthError::UnknownKey)?;
    let date_s = header("x-amz-date").ok_or(AuthError::BadDate("missing"))?;
    let when = parse_amz_date(date_s)?;
    if auth.date != &date_s[..8] {
        return Err(AuthError::Scope("the date is not x-amz-date's"));
    }
    if auth.region != region {
        return Err(AuthError::Scope("wrong region"));
    }
    if auth.service != SERVICE {
        return Err(AuthError::Scope("the service must be s3"));
    }
    let skew = now.duration_since(when).unwrap_or_else(|e| e.duration());
    if skew > MAX_SKEW {
        return Err(AuthError::Skewed);
    }
    for required in ["host", "x-amz-date"] {
        if !auth.signed_headers.contains(&required) {
            return Err(AuthError::Malformed("SignedHeaders must include host and x-amz-date"));
        }
    }
    let (body_sig, payload) = match (header("x-amz-content-sha256"), body) {
        (Some("UNSIGNED-PAYLOAD"), _) => (SignableBody::UnsignedPayload, Payload::Unsigned),
        (Some(h @ "STREAMING-UNSIGNED-PAYLOAD-TRAILER"), None) => {
            (SignableBody::Precomputed(h.to_string()), Payload::ChunkedUnsignedTrailer)
        }
        (Some(h), None) if h.starts_with("STREAMING-") => {
            return Err(AuthError::Unsupported(
                "x-amz-content-sha256: of the streaming forms only STREAMING-UNSIGNED-PAYLOAD-TRAILER is served",
            ));
        }
        (Some(h), None) => {
            if h.len() != 64 || !h.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(AuthError::Malformed(
                    "x-amz-content-sha256 must be 64 hex digits, UNSIGNED-PAYLOAD or STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                ));
            }
            (SignableBody::Precomputed(h.to_string()), Payload::Sha256(h.to_ascii_lowercase()))
        }
        (Some(h), Some(body)) => {
            if !h.eq_ignore_ascii_case(&sha256_hex(body)) {
                return Err(AuthError::PayloadHash);
            }
            (SignableBody::Precomputed(h.to_string()), Payload::Sha256(h.to_ascii_lowercase()))
        }
        (None, Some(body)) => (SignableBody::Bytes(body), Payload::Unsigned),
        (None, None) => {
            return Err(AuthError::Malformed("x-amz-content-sha256 is required on a request with a streamed body"));
        }
    };
    let mut signed = Vec::new();
    for name in &auth.signed_headers {
        if *name == "x-amz-date" {
            continue; // the signer adds it from the time
        }
        let values: Vec<&str> =
            headers.iter().filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str()).collect();
        if values.is_empty() {
            return Err(AuthError::MissingSignedHeader(name.to_string()));
        }
        for v in values {
            signed.push((*name, v));
        }
    }
    let identity = Credentials::new(&user.access_key, &user.secret_key, None, None, "rctb-gateway").into();
    let mut settings = s3_settings();
    settings.excluded_headers = None;
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(when)
        .settings(settings)
        .build()
        .map_err(|_| AuthError::Malformed("unusable signing parameters"))?
        .into();
    let req = SignableRequest::new(method, uri, signed.into_iter(), body_sig)
        .map_err(|_| AuthError::Malformed("the request cannot be canonicalised"))?;
    let out = sigv4_sign(req, &params).map_err(|_| AuthError::Malformed("the request cannot be canonicalised"))?;
    if !bool::from(out.signature().as_bytes().ct_eq(auth.signature.as_bytes())) {
        return Err(AuthError::Signature);
    }
    let who = Principal {
        access_key: user.access_key.clone(),
        admin: user.admin,
        id: PrincipalId::from_credentials(&user.access_key, &user.secret_key),
    };
    Ok((who, payload))
}

/// Signs a request for our client: returns the headers to add
/// (`authorization`, `x-amz-date`, `x-amz-content-sha256`). `headers` must
/// include `host`.
pub fn sign(
    user: &User,
    region: &str,
    at: SystemTime,
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Vec<(String, String)>, String> {
    sign_payload(user, region, at, method, uri, headers, &sha256_hex(body))
}

/// [`sign`] with `x-amz-content-sha256` given as is: a body's hash,
/// `UNSIGNED-PAYLOAD` or `STREAMING-UNSIGNED-PAYLOAD-TRAILER` (an
/// `aws-chunked` body), as other S3 clients sign.
pub fn sign_payload(
    user: &User,
    region: &str,
    at: SystemTime,
    method: &str,
    uri: &str,
    headers: &[(String, String)],
    payload: &str,
) -> Result<Vec<(String, String)>, String> {
    let hash = payload.to_string();
    let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.push(("x-amz-content-sha256", &hash));
    let identity = Credentials::new(&user.access_key, &user.secret_key, None, None, "rctb-gateway").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SERVICE)
        .time(at)
        .settings(s3_settings())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let req = SignableRequest::new(method, uri, all.into_iter(), SignableBody::Precomputed(hash.clone()))
        .map_err(|e| e.to_string())?;
    let (instructions, _sig) = sigv4_sign(req, &params).map_err(|e| e.to_string())?.into_parts();
    let mut out: Vec<(String, String)> = instructions.headers().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    out.push(("x-amz-content-sha256".into(), hash));
    Ok(out)
}

#[cfg(test)]
mod tests;

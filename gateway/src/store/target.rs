//! Target decoding: a PREPARE target (`/bucket/key[?query]`) or an S3
//! route's path becomes an [`ObjectPath`], by the rules versitygw's RC
//! routes follow (docs/protocols.md §3a.2). It owns the decoding and the query's
//! classification; the path checks after decoding are
//! [`ObjectPath::check`]'s.
//!
//! - The key is percent-decoded as a whole: an encoded slash inside a
//!   segment (`a%2Fb`) is a slash of the key, so `/b/a%2Fb` and `/b/a/b`
//!   name one object. The checks run after decoding, so `%2E%2E%2F` is a
//!   `..` segment and refused like `../`.
//! - The query is classified before any session exists. Plain (no query)
//!   for GET and PUT; PUT with exactly `partNumber` and `uploadId` (either
//!   order) is UploadPart; GET with `partNumber` alone is GetPart. Each
//!   value is percent-decoded (`uploadId=a%2Bb` is `a+b`). Refused, each
//!   as [`StoreError::BadQuery`] naming the key and the rule: an empty
//!   query, a key other than the two, a repeated key, malformed
//!   percent-encoding, a PUT with one of the two keys, a GET with
//!   `uploadId`, an empty upload id, a part number that is not decimal
//!   1..=10000 or is above the configured limit.

use rctb_core::wire::hipobj::Op;

use super::{MAX_PART_NUMBER, ObjectPath, Part, StoreError};

/// What a PREPARE target names: an object, or part `get_part` of a
/// completed object (GetPart); an upload's part is `path.part`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The object (or the upload's part).
    pub path: ObjectPath,
    /// The completed object's part to GET (GetPart).
    pub get_part: Option<u32>,
}

fn bad_query(key: &str, rule: &'static str) -> StoreError {
    StoreError::BadQuery { key: key.to_string(), rule }
}

/// Every `%` is followed by two hex digits.
fn well_formed(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .enumerate()
        .all(|(i, c)| *c != b'%' || b.get(i + 1..i + 3).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)))
}

/// Percent-decodes `s` strictly (malformed escapes and non-UTF-8 refused).
fn decode(s: &str) -> Result<String, &'static str> {
    if !well_formed(s) {
        return Err("malformed percent-encoding (% must be followed by two hex digits)");
    }
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| "not UTF-8 after percent-decoding")
}

/// A part number: decimal digits, 1..=`max` (at most 10000).
fn part_number(v: &str, max: u32) -> Result<u32, StoreError> {
    let max = max.min(MAX_PART_NUMBER);
    let rule = "must be a decimal number 1..=10000, and within the server's part limit";
    if v.is_empty() || v.len() > 5 || !v.bytes().all(|c| c.is_ascii_digit()) {
        return Err(bad_query("partNumber", rule));
    }
    match v.parse::<u32>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(bad_query("partNumber", rule)),
    }
}

impl ObjectPath {
    /// An S3 route's path, or a part upload's target (`?partNumber=N&uploadId=U`):
    /// [`ObjectPath::from_prepare_target`] with PUT's rules and the full
    /// part range.
    pub fn from_target(target: &str) -> Result<Self, StoreError> {
        Ok(Self::from_prepare_target(Op::Put, target, MAX_PART_NUMBER)?.path)
    }

    /// Decodes and classifies a PREPARE target of `op` (see the module
    /// docs); part numbers above `max_part` are refused.
    pub fn from_prepare_target(op: Op, target: &str, max_part: u32) -> Result<Target, StoreError> {
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        let rest = path.strip_prefix('/').ok_or(StoreError::BadKey("the target must start with /"))?;
        let (bucket, key) = rest.split_once('/').ok_or(StoreError::BadKey("the target must be /bucket/key"))?;
        let bucket = decode(bucket).map_err(StoreError::BadBucket)?;
        let key = decode(key).map_err(StoreError::BadKey)?;
        let (mut part, mut get_part) = (None, None);
        if let Some(q) = query {
            let (number, upload_id) = split_query(q)?;
            match op {
                Op::Get => {
                    if upload_id.is_some() {
                        return Err(bad_query(
                            "uploadId",
                            "a GET takes partNumber alone (GetPart), never an upload id",
                        ));
                    }
                    let n = number.ok_or_else(|| bad_query("partNumber", "missing"))?;
                    get_part = Some(part_number(&n, max_part)?);
                }
                Op::Put => match (number, upload_id) {
                    (Some(n), Some(u)) => {
                        let number = part_number(&n, max_part)?;
                        if u.is_empty() {
                            return Err(bad_query("uploadId", "must not be empty"));
                        }
                        part = Some(Part { number, upload_id: u });
                    }
                    (None, _) => return Err(bad_query("partNumber", "UploadPart needs partNumber beside uploadId")),
                    (Some(_), None) => {
                        return Err(bad_query("uploadId", "UploadPart needs uploadId beside partNumber"));
                    }
                },
            }
        }
        let p = ObjectPath { bucket, key, part };
        p.check()?;
        Ok(Target { path: p, get_part })
    }
}

/// The decoded `partNumber` and `uploadId` of a query; any other key, a
/// repeated key, an empty query or a malformed escape is refused.
fn split_query(q: &str) -> Result<(Option<String>, Option<String>), StoreError> {
    if q.is_empty() {
        return Err(bad_query("", "an empty query (? alone) is not allowed"));
    }
    let (mut number, mut upload_id) = (None, None);
    for pair in q.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let key = decode(k).map_err(|rule| bad_query(k, rule))?;
        let slot = match key.as_str() {
            "partNumber" => &mut number,
            "uploadId" => &mut upload_id,
            _ => return Err(bad_query(&key, "only partNumber and uploadId are allowed")),
        };
        let v = decode(v).map_err(|rule| bad_query(&key, rule))?;
        if slot.replace(v).is_some() {
            return Err(bad_query(&key, "must not be repeated"));
        }
    }
    Ok((number, upload_id))
}

//! Bodies that do not fit in memory: a request body streamed into the
//! store's blocking `put_stream` ([`pump`], [`BodyReader`], with the
//! `aws-chunked` decoding of [`AwsChunked`] and the size and payload-hash
//! checks of [`Checked`]), and a response body streamed out of it
//! ([`ChannelBody`]).
//!
//! A failure on the request side (the client hung up, the body is over the
//! limit, its SHA-256 is not the signed one, a malformed chunk) is an
//! `io::Error` to the store, which then stores nothing and removes its
//! temporary; the S3 answer for it is kept in a [`Verdict`] the route reads
//! afterwards.

use std::io::{self, BufRead, Read};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::ErrorReply;

/// Frames in flight between the HTTP task and the store's thread.
const DEPTH: usize = 8;

/// A response body fed from a channel (by a blocking store reader).
#[derive(Debug)]
pub(super) struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    remaining: u64,
}

impl ChannelBody {
    /// A body of exactly `len` bytes and the sender that feeds it.
    pub(super) fn new(len: u64) -> (mpsc::Sender<Result<Bytes, io::Error>>, Self) {
        let (tx, rx) = mpsc::channel(DEPTH);
        (tx, ChannelBody { rx, remaining: len })
    }
}

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(Ok(b))) => {
                self.remaining = self.remaining.saturating_sub(b.len() as u64);
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
            Poll::Ready(None) if self.remaining > 0 => {
                Poll::Ready(Some(Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the object ended early"))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// The S3 answer for a body that failed on the way to the store (set by
/// the readers, read by the route once the store returned).
#[derive(Clone, Debug, Default)]
pub(super) struct Verdict(Arc<Mutex<Option<ErrorReply>>>);

impl Verdict {
    /// Records `e` (the first failure wins) and returns the `io::Error`
    /// that stops the store.
    fn fail(&self, e: ErrorReply) -> io::Error {
        let msg = e.message.clone();
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(e);
        }
        io::Error::new(io::ErrorKind::InvalidData, msg)
    }

    /// The failure recorded, if any.
    pub(super) fn take(&self) -> Option<ErrorReply> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Copies `body`'s data frames into `tx` until the body ends (the sender
/// is then dropped: end of data) or the store stops reading. A body that
/// breaks (the client hung up, fewer bytes than Content-Length) sends an
/// error, so the store stores nothing.
pub(super) async fn pump(mut body: Incoming, tx: mpsc::Sender<Result<Bytes, io::Error>>, verdict: Verdict) {
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data()
                    && !data.is_empty()
                    && tx.send(Ok(data)).await.is_err()
                {
                    return; // the store stopped reading (and says why)
                }
            }
            Err(e) => {
                let err = verdict.fail(ErrorReply::new(
                    400,
                    "IncompleteBody",
                    format!("the request body broke off before its end: {e}"),
                ));
                let _ = tx.send(Err(err)).await;
                return;
            }
        }
    }
}

/// The blocking side of [`pump`]'s channel, as a `Read`.
#[derive(Debug)]
pub(super) struct BodyReader {
    rx: mpsc::Receiver<Result<Bytes, io::Error>>,
    cur: Bytes,
}

impl BodyReader {
    /// A reader and the sender [`pump`] feeds it through.
    pub(super) fn new() -> (mpsc::Sender<Result<Bytes, io::Error>>, Self) {
        let (tx, rx) = mpsc::channel(DEPTH);
        (tx, BodyReader { rx, cur: Bytes::new() })
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur.advance(n);
        Ok(n)
    }
}

/// The longest line of an `aws-chunked` body (a chunk header or a trailer).
const MAX_CHUNK_LINE: usize = 8 * 1024;

/// Decodes an `aws-chunked` body without chunk signatures
/// (`STREAMING-UNSIGNED-PAYLOAD-TRAILER`): `hex-size\r\n data \r\n`, ...,
/// `0\r\n`, then trailer lines `name:value\r\n` and an empty line. The
/// trailers are kept ([`AwsChunked::trailers`]); a chunk extension such as
/// `;chunk-signature=...` is refused (that is the signed form).
#[derive(Debug)]
pub(super) struct AwsChunked<R> {
    inner: io::BufReader<R>,
    /// Data bytes left in the current chunk.
    left: u64,
    done: bool,
    verdict: Verdict,
    /// The trailers, once the body ended.
    trailers: Trailers,
}

/// The trailers of an `aws-chunked` body (names lowercase), filled when
/// it ends.
pub(super) type Trailers = Arc<Mutex<Vec<(String, String)>>>;

/// CRC-32 (ISO-HDLC), S3's `x-amz-checksum-crc32`.
static CRC32: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);

/// The 4 big-endian bytes of an `x-amz-checksum-crc32` value (base64), or
/// a 400 naming the header and the rule.
pub(super) fn parse_crc32(value: &str) -> Result<u32, ErrorReply> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD.decode(value.trim()).ok();
    let b: [u8; 4] = bytes.and_then(|b| b.try_into().ok()).ok_or_else(|| {
        ErrorReply::new(400, "InvalidRequest", "x-amz-checksum-crc32: must be the base64 of 4 bytes (8 characters)")
    })?;
    Ok(u32::from_be_bytes(b))
}

impl<R: Read> AwsChunked<R> {
    pub(super) fn new(inner: R, verdict: Verdict, trailers: Trailers) -> Self {
        AwsChunked { inner: io::BufReader::with_capacity(64 * 1024, inner), left: 0, done: false, verdict, trailers }
    }

    fn bad(&self, rule: &str) -> io::Error {
        self.verdict.fail(ErrorReply::new(400, "InvalidRequest", format!("aws-chunked body: {rule}")))
    }

    /// One CRLF-terminated line, without the CRLF.
    fn line(&mut self) -> io::Result<String> {
        let mut raw = Vec::new();
        (&mut self.inner).take(MAX_CHUNK_LINE as u64 + 2).read_until(b'\n', &mut raw)?;
        if raw.last() != Some(&b'\n') {
            return Err(if raw.len() > MAX_CHUNK_LINE {
                self.bad("a chunk header or trailer line is longer than 8 KiB")
            } else {
                self.bad("the body ended inside a chunk header or trailer")
            });
        }
        raw.pop();
        if raw.pop() != Some(b'\r') {
            return Err(self.bad("lines must end with CRLF"));
        }
        String::from_utf8(raw).map_err(|_| self.bad("a chunk header or trailer is not UTF-8"))
    }
}

impl<R: Read> Read for AwsChunked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done || buf.is_empty() {
            return Ok(0);
        }
        if self.left == 0 {
            let header = self.line()?;
            if header.contains(';') {
                return Err(self
                    .bad("chunk extensions (chunk-signature) are not served; use STREAMING-UNSIGNED-PAYLOAD-TRAILER"));
            }
            let size = u64::from_str_radix(header.trim(), 16)
                .ok()
                .filter(|_| !header.trim().is_empty() && header.trim().len() <= 16)
                .ok_or_else(|| self.bad("a chunk size must be hexadecimal"))?;
            if size == 0 {
                let mut trailers = Vec::new();
                loop {
                    let t = self.line()?;
                    if t.is_empty() {
                        break;
                    }
                    let (k, v) = t.split_once(':').ok_or_else(|| self.bad("a trailer must be name:value"))?;
                    trailers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
                }
                *self.trailers.lock().unwrap_or_else(|p| p.into_inner()) = trailers;
                self.done = true;
                return Ok(0);
            }
            self.left = size;
        }
        let want = buf.len().min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        if n == 0 {
            return Err(self.bad("the body ended inside a chunk"));
        }
        self.left -= n as u64;
        if self.left == 0 {
            let mut crlf = [0u8; 2];
            self.inner.read_exact(&mut crlf).map_err(|_| self.bad("the body ended after a chunk's data"))?;
            if &crlf != b"\r\n" {
                return Err(self.bad("a chunk's data must be followed by CRLF"));
            }
        }
        Ok(n)
    }
}

/// What a body must match besides its size limit.
#[derive(Debug, Default)]
pub(super) struct Expect {
    /// The decoded length the client declared (`x-amz-decoded-content-length`).
    pub(super) length: Option<u64>,
    /// The signed SHA-256 (lowercase hex).
    pub(super) sha256: Option<String>,
    /// `x-amz-checksum-crc32` from the headers.
    pub(super) crc32: Option<u32>,
    /// The trailers of an `aws-chunked` body (`x-amz-checksum-crc32` there).
    pub(super) trailers: Option<Trailers>,
}

/// Counts the (decoded) bytes against the size limit and, when the data
/// ends, checks the declared length, the signed SHA-256 and the CRC32
/// (header or trailer), before the store may commit.
pub(super) struct Checked<R> {
    inner: R,
    limit: u64,
    n: u64,
    expect: Expect,
    sha: Sha256,
    crc: crc::Digest<'static, u32>,
    verdict: Verdict,
}

impl<R> std::fmt::Debug for Checked<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checked").field("limit", &self.limit).field("n", &self.n).finish_non_exhaustive()
    }
}

impl<R: Read> Checked<R> {
    pub(super) fn new(inner: R, limit: u64, expect: Expect, verdict: Verdict) -> Self {
        Checked { inner, limit, n: 0, expect, sha: Sha256::new(), crc: CRC32.digest(), verdict }
    }

    /// The checks at the end of the data.
    fn finish(&mut self) -> Result<(), ErrorReply> {
        if let Some(d) = self.expect.length
            && d != self.n
        {
            return Err(ErrorReply::new(
                400,
                "IncompleteBody",
                format!("x-amz-decoded-content-length: {d} declared, {} received", self.n),
            ));
        }
        if let Some(want) = &self.expect.sha256 {
            let got: String = std::mem::take(&mut self.sha).finalize().iter().map(|b| format!("{b:02x}")).collect();
            if got != *want {
                return Err(ErrorReply::new(
                    400,
                    "XAmzContentSHA256Mismatch",
                    "x-amz-content-sha256 does not match the body",
                ));
            }
        }
        let trailer = match &self.expect.trailers {
            Some(t) => {
                let t = t.lock().unwrap_or_else(|p| p.into_inner());
                match t.iter().find(|(k, _)| k == "x-amz-checksum-crc32") {
                    Some((_, v)) => Some(parse_crc32(v)?),
                    None => None,
                }
            }
            None => None,
        };
        if let Some(want) = self.expect.crc32.or(trailer) {
            let got = std::mem::replace(&mut self.crc, CRC32.digest()).finalize();
            if got != want {
                return Err(ErrorReply::new(
                    400,
                    "BadDigest",
                    format!("x-amz-checksum-crc32: {want:08x} declared, the body's CRC32 is {got:08x}"),
                ));
            }
        }
        Ok(())
    }
}

impl<R: Read> Read for Checked<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n == 0 {
            return match self.finish() {
                Ok(()) => Ok(0),
                Err(e) => Err(self.verdict.fail(e)),
            };
        }
        self.n += n as u64;
        if self.n > self.limit {
            return Err(self.verdict.fail(too_large(self.limit)));
        }
        if self.expect.sha256.is_some() {
            self.sha.update(&buf[..n]);
        }
        self.crc.update(&buf[..n]);
        Ok(n)
    }
}

/// S3's answer to a body over the gateway's limit.
pub(super) fn too_large(limit: u64) -> ErrorReply {
    ErrorReply::new(
        400,
        "EntityTooLarge",
        format!("the body is larger than this gateway's object size limit of {limit} bytes (--max-object-size)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    type Decoded = (Vec<u8>, Vec<(String, String)>);

    fn decode(body: &[u8]) -> Result<Decoded, String> {
        let v = Verdict::default();
        let t = Trailers::default();
        let mut r = AwsChunked::new(body, v.clone(), t.clone());
        let mut out = Vec::new();
        match r.read_to_end(&mut out) {
            Ok(_) => Ok((out, t.lock().unwrap().clone())),
            Err(_) => Err(v.take().map(|e| e.message).unwrap_or_default()),
        }
    }

    #[test]
    fn aws_chunked_decodes_chunks_and_trailers() {
        let (data, trailers) =
            decode(b"5\r\nhello\r\n6\r\n world\r\n0\r\nx-amz-checksum-crc32:DUoRhQ==\r\n\r\n").unwrap();
        assert_eq!(data, b"hello world");
        assert_eq!(trailers, [("x-amz-checksum-crc32".to_string(), "DUoRhQ==".to_string())]);
        assert_eq!(decode(b"0\r\n\r\n").unwrap().0, b"");
    }

    #[test]
    fn aws_chunked_refuses_malformed_bodies_naming_the_rule() {
        for (body, rule) in [
            (&b"zz\r\nhello\r\n0\r\n\r\n"[..], "hexadecimal"),
            (b"5\r\nhel", "ended inside a chunk"),
            (b"5\r\nhelloXX0\r\n\r\n", "followed by CRLF"),
            (b"5;chunk-signature=ab\r\nhello\r\n0\r\n\r\n", "chunk-signature"),
            (b"5\nhello\r\n", "CRLF"),
            (b"0\r\nbad trailer\r\n\r\n", "name:value"),
            (b"5\r\nhello\r\n", "ended inside a chunk header"),
        ] {
            let e = decode(body).unwrap_err();
            assert!(e.contains(rule), "{:?}: {e}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn checked_enforces_limit_length_and_hash() {
        let sha = |d: &[u8]| -> String { Sha256::digest(d).iter().map(|b| format!("{b:02x}")).collect() };
        let run = |data: &[u8], limit, length, sha256: Option<String>, crc32| {
            let v = Verdict::default();
            let mut r = Checked::new(data, limit, Expect { length, sha256, crc32, trailers: None }, v.clone());
            let mut out = Vec::new();
            r.read_to_end(&mut out).map(|_| out).map_err(|_| v.take().unwrap().code)
        };
        // CRC32("abc") = 0x352441c2; "NSRBwg==" is its base64.
        assert_eq!(parse_crc32("NSRBwg==").unwrap(), 0x352441c2);
        assert_eq!(parse_crc32("NSRB").unwrap_err().code, "InvalidRequest");
        assert_eq!(run(b"abc", 3, Some(3), Some(sha(b"abc")), Some(0x352441c2)).unwrap(), b"abc");
        assert_eq!(run(b"abcd", 3, None, None, None).unwrap_err(), "EntityTooLarge");
        assert_eq!(run(b"abc", 3, None, Some(sha(b"abd")), None).unwrap_err(), "XAmzContentSHA256Mismatch");
        assert_eq!(run(b"abc", 9, Some(4), None, None).unwrap_err(), "IncompleteBody");
        assert_eq!(run(b"abc", 9, None, None, Some(0x352441c3)).unwrap_err(), "BadDigest");
    }
}

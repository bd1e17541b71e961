//! The object backend: an [`ObjectStore`] trait and [`FsStore`], a
//! filesystem store with atomic PUTs.
//!
//! A PREPARE target or an S3 route's path (`/bucket/key[?query]`) becomes
//! an [`ObjectPath`] (the bucket, the percent-decoded key, the optional
//! upload part) by the rules of the `target` module (docs/protocols.md §3a.2). Decoded keys
//! are checked before they touch the filesystem: no `..` or `.` segment, no
//! empty segment (so no absolute part), no NUL, each segment short enough
//! for a file name. Each rule broken is its own [`StoreError::BadKey`]
//! naming the rule.
//!
//! Layout under the root (nothing a key spells can collide with it): key
//! `a/b/c` of bucket `bk` is the file `bk/a.d/b.d/c.o`; intermediate
//! segments are directories ending `.d`, objects files ending `.o`, parts
//! of an upload `bk/a.d/b.d/c.u/<uploadId>/<partNumber>`. Temporary files
//! live in `.tmp/` at the root (a bucket name cannot start with `.`).
//!
//! Each object file is a 68-byte header (`HOBJ`, the 32-hex MD5 ETag, the
//! 32-hex version id) followed by the data, written as one file: a temporary
//! file is filled, fsynced and renamed over the object, then the directory
//! is fsynced. A crash at any point leaves either the old object or the new
//! one, never a part of one; leftover temporaries are removed by
//! [`FsStore::open`]. An object completed from a multipart upload starts
//! `HOBM` instead, and its header goes on with the part count (u32 LE) and
//! each part's size (u64 LE), so GetPart finds part N in the same file,
//! replaced as atomically as the data.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use md5::{Digest, Md5};
use rand_core::RngCore;
use thiserror::Error;

/// Longest bucket name (S3's rule).
pub const MAX_BUCKET_LEN: usize = 63;
/// Longest key segment: a file name is at most 255 bytes, less our suffix.
pub const MAX_SEGMENT_LEN: usize = 253;
/// Highest part number (S3's rule).
pub const MAX_PART_NUMBER: u32 = 10_000;
/// Longest upload id.
pub const MAX_UPLOAD_ID_LEN: usize = 128;

const MAGIC: &[u8; 4] = b"HOBJ";
const MAGIC_MULTIPART: &[u8; 4] = b"HOBM";
const HEADER_LEN: u64 = 4 + 32 + 32;
const TMP_DIR: &str = ".tmp";

/// Why a backend call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The bucket name breaks a rule.
    #[error("bucket: {0}")]
    BadBucket(&'static str),
    /// The key breaks a rule (checked after percent-decoding).
    #[error("key: {0}")]
    BadKey(&'static str),
    /// The part-upload query breaks a rule.
    #[error("part upload: {0}")]
    BadPart(&'static str),
    /// A target's query breaks a rule of §3a (the key it names, the rule).
    #[error("query key '{key}': {rule}")]
    BadQuery {
        /// The query key.
        key: String,
        /// The rule it broke.
        rule: &'static str,
    },
    /// GetPart of a part the object does not have.
    #[error("part {number} of an object of {parts} part(s)")]
    InvalidPartNumber {
        /// The part asked for (1-based).
        number: u32,
        /// The parts the object has.
        parts: usize,
    },
    /// No object at that path.
    #[error("no such object")]
    NoSuchKey,
    /// No multipart upload with that id for that object (never created,
    /// or already completed or aborted).
    #[error("no multipart upload {0:?} for this object")]
    NoSuchUpload(String),
    /// The backend does not offer this call (what it is).
    #[error("this object store does not support {0}")]
    Unsupported(&'static str),
    /// `offset + size` is past the end of the object.
    #[error("range {offset}+{size} is outside the object's {len} bytes")]
    Range {
        /// The range's first byte.
        offset: u64,
        /// Its length.
        size: u64,
        /// The object's length.
        len: u64,
    },
    /// An object file without our header (damaged, or not ours).
    #[error("object file {path} is corrupt: {why}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A store option breaks a rule (the option, the rule).
    #[error("{field}: {rule}")]
    BadStore {
        /// The option (`--store`, `--endpoint`).
        field: &'static str,
        /// The rule it broke.
        rule: &'static str,
    },
    /// A remote store (S3) failed a request after its retries.
    #[error("{store}: {op} {key}: {message}")]
    Backend {
        /// The store (`S3 store s3://BUCKET at URL`).
        store: String,
        /// The request (`PUT`, `GET`, ...).
        op: &'static str,
        /// The backend key.
        key: String,
        /// What the client library said.
        message: String,
        /// The store did not answer in time or answered 5xx (the request
        /// may pass later): 503 rather than 500.
        unavailable: bool,
    },
    /// A filesystem call failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io { op, path: path.to_path_buf(), source }
}

/// One part of a multipart upload (`?partNumber=N&uploadId=U`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// `partNumber` (1..=10000).
    pub number: u32,
    /// `uploadId`.
    pub upload_id: String,
}

/// Where an object (or a part) lives: bucket, decoded key, optional part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPath {
    /// The bucket (S3's naming rules).
    pub bucket: String,
    /// The key, percent-decoded.
    pub key: String,
    /// The upload's part, for a part upload.
    pub part: Option<Part>,
}

mod s3;
mod target;
#[cfg(feature = "s3")]
pub use s3::S3Store;
pub use s3::{BUFFER_LIMIT, MAX_S3_KEY_LEN, S3Options};
pub use target::Target;

impl fmt::Display for ObjectPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.bucket, self.key)?;
        if let Some(p) = &self.part {
            write!(f, " (part {} of upload {})", p.number, p.upload_id)?;
        }
        Ok(())
    }
}

impl ObjectPath {
    /// Builds a path from a bucket and a decoded key, checking both.
    pub fn new(bucket: &str, key: &str) -> Result<Self, StoreError> {
        let p = ObjectPath { bucket: bucket.to_string(), key: key.to_string(), part: None };
        p.check()?;
        Ok(p)
    }

    pub(crate) fn check(&self) -> Result<(), StoreError> {
        let b = &self.bucket;
        if b.is_empty() || b.len() > MAX_BUCKET_LEN {
            return Err(StoreError::BadBucket("must be 1..=63 bytes"));
        }
        if !b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.') {
            return Err(StoreError::BadBucket("only lowercase letters, digits, '-' and '.'"));
        }
        if !b.as_bytes()[0].is_ascii_alphanumeric() {
            return Err(StoreError::BadBucket("must start with a letter or digit"));
        }
        if self.key.contains('\0') {
            return Err(StoreError::BadKey("must not contain NUL"));
        }
        if self.key.is_empty() {
            return Err(StoreError::BadKey("must not be empty"));
        }
        if self.key.starts_with('/') {
            return Err(StoreError::BadKey("must not be absolute (start with /)"));
        }
        for seg in self.key.split('/') {
            match seg {
                "" => return Err(StoreError::BadKey("must not have an empty segment (//, or a trailing /)")),
                "." | ".." => return Err(StoreError::BadKey("must not have a . or .. segment")),
                s if s.len() > MAX_SEGMENT_LEN => return Err(StoreError::BadKey("a segment is longer than 253 bytes")),
                _ => {}
            }
        }
        if let Some(p) = &self.part {
            if p.number == 0 || p.number > MAX_PART_NUMBER {
                return Err(StoreError::BadQuery { key: "partNumber".into(), rule: "must be 1..=10000" });
            }
            let u = &p.upload_id;
            let bad = |rule| StoreError::BadQuery { key: "uploadId".into(), rule };
            if u.is_empty() || u.len() > MAX_UPLOAD_ID_LEN {
                return Err(bad("must be 1..=128 bytes after percent-decoding"));
            }
            if !u.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_.~+=".contains(&c)) || u.starts_with('.') {
                return Err(bad("letters, digits and - _ . ~ + = only, not starting with ."));
            }
        }
        Ok(())
    }

    /// The file under `root` (the checks above make every component a
    /// plain name: nothing leaves `root`).
    fn file(&self, root: &Path) -> PathBuf {
        let mut p = root.join(&self.bucket);
        let segs: Vec<&str> = self.key.split('/').collect();
        let (last, dirs) = segs.split_last().unwrap_or((&"", &[]));
        for d in dirs {
            p.push(format!("{d}.d"));
        }
        match &self.part {
            None => p.push(format!("{last}.o")),
            Some(part) => {
                p.push(format!("{last}.u"));
                p.push(&part.upload_id);
                p.push(part.number.to_string());
            }
        }
        p
    }
}

/// What a stored object is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Bytes.
    pub size: u64,
    /// MD5 of the data, 32 lowercase hex (S3's ETag of a single PUT).
    pub etag: String,
    /// 32 lowercase hex, new for every PUT.
    pub version_id: String,
    /// When this version was stored (S3's Last-Modified), if the store
    /// keeps it (FsStore: the object file's mtime, set as it was written).
    pub last_modified: Option<SystemTime>,
}

/// An object backend. Calls block; the HTTP layer runs them off its
/// reactor.
pub trait ObjectStore: Send + Sync + fmt::Debug {
    /// Stores `data` at `path` (an object, or a part when `path.part` is
    /// set), replacing what was there atomically.
    fn put(&self, path: &ObjectPath, data: &[u8]) -> Result<ObjectMeta, StoreError>;

    /// [`ObjectStore::put`] of everything `data` yields until its end, as
    /// atomically: an error from `data` (a client that hung up, a body
    /// over the limit, a payload hash that does not match) stores nothing
    /// and leaves no temporary behind. A part (`path.part`) goes only into
    /// an upload that exists ([`StoreError::NoSuchUpload`] otherwise, also
    /// when it is aborted while the part arrives). The default collects the data in
    /// memory and calls `put`; [`FsStore`] streams it to its temporary file.
    fn put_stream(&self, path: &ObjectPath, data: &mut dyn Read) -> Result<ObjectMeta, StoreError> {
        if let Some(p) = &path.part
            && !self.has_upload(&ObjectPath { part: None, ..path.clone() }, &p.upload_id)?
        {
            return Err(StoreError::NoSuchUpload(p.upload_id.clone()));
        }
        let mut buf = Vec::new();
        data.read_to_end(&mut buf).map_err(|source| StoreError::Io {
            op: "read body",
            path: PathBuf::new(),
            source,
        })?;
        self.put(path, &buf)
    }

    /// Starts a multipart upload of `path` (S3 CreateMultipartUpload): a
    /// new upload id, which [`ObjectStore::has_upload`] then knows.
    fn create_upload(&self, path: &ObjectPath) -> Result<String, StoreError> {
        let _ = path;
        Err(StoreError::Unsupported("CreateMultipartUpload"))
    }

    /// Whether upload `upload_id` of `path` exists (created, or begun by
    /// a part uploaded with the client's own id, and not yet completed or
    /// aborted).
    fn has_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<bool, StoreError> {
        let _ = (path, upload_id);
        Err(StoreError::Unsupported("multipart uploads over S3 routes"))
    }

    /// The parts uploaded so far, by number ([`StoreError::NoSuchUpload`]
    /// for an unknown upload).
    fn list_parts(&self, path: &ObjectPath, upload_id: &str) -> Result<Vec<(u32, ObjectMeta)>, StoreError> {
        let _ = (path, upload_id);
        Err(StoreError::Unsupported("ListParts"))
    }

    /// Drops an upload and its parts ([`StoreError::NoSuchUpload`] for an
    /// unknown one).
    fn abort_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<(), StoreError> {
        let _ = (path, upload_id);
        Err(StoreError::Unsupported("AbortMultipartUpload"))
    }

    /// Reads `buf.len()` bytes at `offset` of the object. A range past the
    /// end is [`StoreError::Range`].
    fn read_range(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<ObjectMeta, StoreError>;

    /// The object's size, ETag and version id.
    fn head(&self, path: &ObjectPath) -> Result<ObjectMeta, StoreError>;

    /// Where part `number` (1-based) of the object lies (S3 GetObject
    /// `partNumber`): an object completed from an upload has its parts; any
    /// other object is one part. A part it lacks is
    /// [`StoreError::InvalidPartNumber`].
    fn head_part(&self, path: &ObjectPath, number: u32) -> Result<PartMeta, StoreError>;

    /// Reads `buf.len()` bytes at `offset` of part `number` (a range past
    /// the part's end is [`StoreError::Range`]).
    fn read_part(&self, path: &ObjectPath, number: u32, offset: u64, buf: &mut [u8]) -> Result<PartMeta, StoreError>;

    /// Removes an object ([`StoreError::NoSuchKey`] when there is none).
    fn delete(&self, path: &ObjectPath) -> Result<(), StoreError>;

    /// The objects of `bucket` whose key starts with `prefix`, in key
    /// (byte) order, at most `max` of them; `true` when more matched.
    fn list(&self, bucket: &str, prefix: &str, max: usize) -> Result<(Vec<Listed>, bool), StoreError>;

    /// Completes a multipart upload: the parts `numbers` (ascending, each
    /// uploaded) become the object, atomically, and the upload's parts are
    /// removed. `etags`, when given per part, must match the parts'.
    fn complete_upload(
        &self,
        path: &ObjectPath,
        upload_id: &str,
        parts: &[(u32, Option<String>)],
    ) -> Result<ObjectMeta, StoreError>;
}

/// One part of a stored object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartMeta {
    /// The whole object's meta.
    pub object: ObjectMeta,
    /// The part's first byte within the object, and its size.
    pub start: u64,
    /// The part's size in bytes.
    pub size: u64,
    /// How many parts the object has.
    pub parts: usize,
}

/// An object file's header.
struct Header {
    meta: ObjectMeta,
    /// Where the data starts in the file.
    data_start: u64,
    /// Part sizes (one part, the whole object, unless it was completed
    /// from an upload).
    parts: Vec<u64>,
}

impl Header {
    /// Part `number`'s start and size.
    fn part(&self, number: u32) -> Result<(u64, u64), StoreError> {
        let i = (number as usize).checked_sub(1).filter(|i| *i < self.parts.len());
        let i = i.ok_or(StoreError::InvalidPartNumber { number, parts: self.parts.len() })?;
        Ok((self.parts[..i].iter().sum(), self.parts[i]))
    }
}

/// One object of a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    /// Its key.
    pub key: String,
    /// What it is.
    pub meta: ObjectMeta,
}

/// A filesystem [`ObjectStore`] (see the module docs for the layout).
pub struct FsStore {
    root: PathBuf,
    rng: Mutex<Box<dyn RngCore + Send>>,
    /// Test hook: fail a PUT after this many data bytes are written (a
    /// crash mid-write, for the crash-safety tests).
    fail_after: Mutex<Option<usize>>,
}

impl fmt::Debug for FsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsStore").field("root", &self.root).finish_non_exhaustive()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl FsStore {
    /// Opens (creating) a store at `root`. Version ids and temporary names
    /// come from `rng`. Leftover temporaries of a crashed PUT are removed.
    pub fn open(root: impl Into<PathBuf>, rng: Box<dyn RngCore + Send>) -> Result<Self, StoreError> {
        let root = root.into();
        let tmp = root.join(TMP_DIR);
        fs::create_dir_all(&tmp).map_err(io_err("create", &tmp))?;
        for e in fs::read_dir(&tmp).map_err(io_err("list", &tmp))? {
            let e = e.map_err(io_err("list", &tmp))?;
            let p = e.path();
            fs::remove_file(&p).map_err(io_err("remove", &p))?;
        }
        Ok(FsStore { root, rng: Mutex::new(rng), fail_after: Mutex::new(None) })
    }

    /// The directory the store lives in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Test hook: the next PUT fails (as a crash would stop it) after
    /// writing `n` data bytes to its temporary file, and leaves that file
    /// behind as a killed process would.
    pub fn fail_next_put_after(&self, n: usize) {
        *self.fail_after.lock().unwrap_or_else(|p| p.into_inner()) = Some(n);
    }

    fn random_hex(&self) -> String {
        let mut b = [0u8; 16];
        self.rng.lock().unwrap_or_else(|p| p.into_inner()).fill_bytes(&mut b);
        hex(&b)
    }

    /// Reads an object file's header; the file is left at its data.
    fn read_header(file: &mut File, path: &Path) -> Result<Header, StoreError> {
        let md = file.metadata().map_err(io_err("stat", path))?;
        let (len, last_modified) = (md.len(), md.modified().ok());
        let corrupt = |why| StoreError::Corrupt { path: path.to_path_buf(), why };
        if len < HEADER_LEN {
            return Err(corrupt("shorter than its header"));
        }
        let mut h = [0u8; HEADER_LEN as usize];
        file.read_exact(&mut h).map_err(io_err("read", path))?;
        let multipart = match &h[..4] {
            m if m == MAGIC => false,
            m if m == MAGIC_MULTIPART => true,
            _ => return Err(corrupt("bad magic")),
        };
        let field = |r: std::ops::Range<usize>| {
            let s = std::str::from_utf8(&h[r]).map_err(|_| corrupt("header is not hex"))?;
            if s.bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)) {
                Ok(s.to_string())
            } else {
                Err(corrupt("header is not hex"))
            }
        };
        let (etag, version_id) = (field(4..36)?, field(36..68)?);
        let mut data_start = HEADER_LEN;
        let mut parts = Vec::new();
        if multipart {
            let mut n = [0u8; 4];
            file.read_exact(&mut n).map_err(|_| corrupt("shorter than its part table"))?;
            let n = u32::from_le_bytes(n);
            if n == 0 || n > MAX_PART_NUMBER {
                return Err(corrupt("part count is not 1..=10000"));
            }
            let mut table = vec![0u8; 8 * n as usize];
            file.read_exact(&mut table).map_err(|_| corrupt("shorter than its part table"))?;
            parts = table.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
            data_start += 4 + table.len() as u64;
        }
        let size = len.checked_sub(data_start).ok_or_else(|| corrupt("shorter than its part table"))?;
        if !multipart {
            parts.push(size);
        } else if parts.iter().try_fold(0u64, |a, p| a.checked_add(*p)) != Some(size) {
            return Err(corrupt("part sizes do not add up to the data"));
        }
        Ok(Header { meta: ObjectMeta { size, etag, version_id, last_modified }, data_start, parts })
    }

    fn open_object(&self, path: &ObjectPath) -> Result<(File, PathBuf), StoreError> {
        let file = path.file(&self.root);
        match File::open(&file) {
            Ok(f) => Ok((f, file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {
                Err(StoreError::NoSuchKey)
            }
            Err(e) => Err(StoreError::Io { op: "open", path: file, source: e }),
        }
    }
}

/// A written file's mtime (what a later stat of the object reads).
fn mtime(f: &File) -> Option<SystemTime> {
    f.metadata().and_then(|m| m.modified()).ok()
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err("fsync", dir))
}

impl ObjectStore for FsStore {
    fn put(&self, path: &ObjectPath, data: &[u8]) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let dest = path.file(&self.root);
        let dir = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        let etag = hex(&Md5::digest(data));
        let version_id = self.random_hex();
        let tmp = self.root.join(TMP_DIR).join(format!("{}.tmp", self.random_hex()));
        let fail_after = self.fail_after.lock().unwrap_or_else(|p| p.into_inner()).take();
        let written = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io_err("create", &tmp))?;
            f.write_all(MAGIC).map_err(io_err("write", &tmp))?;
            f.write_all(etag.as_bytes()).map_err(io_err("write", &tmp))?;
            f.write_all(version_id.as_bytes()).map_err(io_err("write", &tmp))?;
            if let Some(n) = fail_after {
                f.write_all(&data[..n.min(data.len())]).map_err(io_err("write", &tmp))?;
                return Err(StoreError::Io {
                    op: "write",
                    path: tmp.clone(),
                    source: io::Error::other("injected crash (test hook)"),
                });
            }
            f.write_all(data).map_err(io_err("write", &tmp))?;
            f.sync_all().map_err(io_err("fsync", &tmp))?;
            Ok(mtime(&f))
        })();
        let last_modified = match written {
            Ok(t) => t,
            Err(e) => {
                // A crash leaves the temporary behind (open() sweeps it); an
                // ordinary error removes it now.
                if fail_after.is_none() {
                    let _ = fs::remove_file(&tmp);
                }
                return Err(e);
            }
        };
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            // A directory where the object would go (e.g. `a.o/`) cannot
            // arise from our layout; report it as it is.
            return Err(StoreError::Io { op: "rename", path: dest, source: e });
        }
        sync_dir(&dir)?;
        Ok(ObjectMeta { size: data.len() as u64, etag, version_id, last_modified })
    }

    fn put_stream(&self, path: &ObjectPath, data: &mut dyn Read) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let dest = path.file(&self.root);
        let dir = dest.parent().unwrap_or(&self.root).to_path_buf();
        let no_upload =
            || StoreError::NoSuchUpload(path.part.as_ref().map(|p| p.upload_id.clone()).unwrap_or_default());
        // A part goes only into an upload that exists (an abort meanwhile
        // must not bring it back); an object's directories are made.
        if path.part.is_some() {
            if !dir.is_dir() {
                return Err(no_upload());
            }
        } else {
            fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        }
        let version_id = self.random_hex();
        let tmp = self.root.join(TMP_DIR).join(format!("{}.tmp", self.random_hex()));
        // The header holds the MD5, known only at the end: a placeholder
        // header first, the data while hashing, then the real header.
        let written = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io_err("create", &tmp))?;
            f.write_all(&[0u8; HEADER_LEN as usize]).map_err(io_err("write", &tmp))?;
            let mut md5 = Md5::new();
            let mut size = 0u64;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = match data.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(source) => return Err(StoreError::Io { op: "read body for", path: dest.clone(), source }),
                };
                md5.update(&buf[..n]);
                f.write_all(&buf[..n]).map_err(io_err("write", &tmp))?;
                size += n as u64;
            }
            let etag = hex(&md5.finalize());
            f.seek(SeekFrom::Start(0)).map_err(io_err("seek", &tmp))?;
            f.write_all(MAGIC).map_err(io_err("write", &tmp))?;
            f.write_all(etag.as_bytes()).map_err(io_err("write", &tmp))?;
            f.write_all(version_id.as_bytes()).map_err(io_err("write", &tmp))?;
            f.sync_all().map_err(io_err("fsync", &tmp))?;
            Ok(ObjectMeta { size, etag, version_id: version_id.clone(), last_modified: mtime(&f) })
        })();
        let meta = match written {
            Ok(m) => m,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            if e.kind() == io::ErrorKind::NotFound && path.part.is_some() {
                return Err(no_upload()); // aborted while the part arrived
            }
            return Err(StoreError::Io { op: "rename", path: dest, source: e });
        }
        sync_dir(&dir)?;
        Ok(meta)
    }

    fn create_upload(&self, path: &ObjectPath) -> Result<String, StoreError> {
        if path.part.is_some() {
            return Err(StoreError::BadPart("the object path must not name a part"));
        }
        path.check()?;
        let id = self.random_hex();
        let dir = self.upload_dir(path, &id)?;
        fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        Ok(id)
    }

    fn has_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<bool, StoreError> {
        Ok(self.upload_dir(path, upload_id)?.is_dir())
    }

    fn list_parts(&self, path: &ObjectPath, upload_id: &str) -> Result<Vec<(u32, ObjectMeta)>, StoreError> {
        let dir = self.upload_dir(path, upload_id)?;
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {
                return Err(StoreError::NoSuchUpload(upload_id.to_string()));
            }
            Err(e) => return Err(StoreError::Io { op: "list", path: dir, source: e }),
        };
        let mut parts = Vec::new();
        for e in entries {
            let e = e.map_err(io_err("list", &dir))?;
            let Some(n) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let file = e.path();
            let mut f = match File::open(&file) {
                Ok(f) => f,
                // Completed or aborted meanwhile.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(StoreError::Io { op: "open", path: file, source: e }),
            };
            parts.push((n, Self::read_header(&mut f, &file)?.meta));
        }
        parts.sort_by_key(|(n, _)| *n);
        Ok(parts)
    }

    fn abort_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<(), StoreError> {
        let dir = self.upload_dir(path, upload_id)?;
        match fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {
                return Err(StoreError::NoSuchUpload(upload_id.to_string()));
            }
            Err(e) => return Err(StoreError::Io { op: "remove", path: dir, source: e }),
        }
        // The object's `.u` directory goes with its last upload.
        if let Some(u) = dir.parent() {
            let _ = fs::remove_dir(u);
        }
        Ok(())
    }

    fn read_range(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let (mut f, file) = self.open_object(path)?;
        let h = Self::read_header(&mut f, &file)?;
        let size = buf.len() as u64;
        if offset.checked_add(size).is_none_or(|end| end > h.meta.size) {
            return Err(StoreError::Range { offset, size, len: h.meta.size });
        }
        f.seek(SeekFrom::Start(h.data_start + offset)).map_err(io_err("seek", &file))?;
        f.read_exact(buf).map_err(io_err("read", &file))?;
        Ok(h.meta)
    }

    fn head(&self, path: &ObjectPath) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let (mut f, file) = self.open_object(path)?;
        Ok(Self::read_header(&mut f, &file)?.meta)
    }

    fn head_part(&self, path: &ObjectPath, number: u32) -> Result<PartMeta, StoreError> {
        path.check()?;
        let (mut f, file) = self.open_object(path)?;
        let h = Self::read_header(&mut f, &file)?;
        let (start, size) = h.part(number)?;
        Ok(PartMeta { object: h.meta, start, size, parts: h.parts.len() })
    }

    fn read_part(&self, path: &ObjectPath, number: u32, offset: u64, buf: &mut [u8]) -> Result<PartMeta, StoreError> {
        path.check()?;
        let (mut f, file) = self.open_object(path)?;
        let h = Self::read_header(&mut f, &file)?;
        let (start, size) = h.part(number)?;
        let len = buf.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(StoreError::Range { offset, size: len, len: size });
        }
        f.seek(SeekFrom::Start(h.data_start + start + offset)).map_err(io_err("seek", &file))?;
        f.read_exact(buf).map_err(io_err("read", &file))?;
        Ok(PartMeta { object: h.meta, start, size, parts: h.parts.len() })
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), StoreError> {
        path.check()?;
        if path.part.is_some() {
            return Err(StoreError::BadPart("DELETE names an object, not a part"));
        }
        let file = path.file(&self.root);
        match fs::remove_file(&file) {
            Ok(()) => sync_dir(file.parent().unwrap_or(&self.root)),
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.kind() == io::ErrorKind::NotADirectory => {
                Err(StoreError::NoSuchKey)
            }
            Err(e) => Err(StoreError::Io { op: "remove", path: file, source: e }),
        }
    }

    fn list(&self, bucket: &str, prefix: &str, max: usize) -> Result<(Vec<Listed>, bool), StoreError> {
        ObjectPath::new(bucket, "x")?;
        let mut keys = std::collections::BTreeMap::new();
        let dir = self.root.join(bucket);
        if dir.is_dir() {
            self.walk(&dir, "", prefix, &mut keys)?;
        }
        let truncated = keys.len() > max;
        let mut out = Vec::new();
        for (key, file) in keys.into_iter().take(max) {
            let mut f = File::open(&file).map_err(io_err("open", &file))?;
            out.push(Listed { key, meta: Self::read_header(&mut f, &file)?.meta });
        }
        Ok((out, truncated))
    }

    fn complete_upload(
        &self,
        path: &ObjectPath,
        upload_id: &str,
        parts: &[(u32, Option<String>)],
    ) -> Result<ObjectMeta, StoreError> {
        check_completion(path, parts)?;
        let part_path =
            |n: u32| ObjectPath { part: Some(Part { number: n, upload_id: upload_id.to_string() }), ..path.clone() };
        if !self.has_upload(path, upload_id)? {
            return Err(StoreError::NoSuchUpload(upload_id.to_string()));
        }
        // Check every part (and its ETag) before writing anything.
        let mut files = Vec::new();
        for (n, etag) in parts {
            let p = part_path(*n);
            p.check()?;
            let (mut f, file) = self.open_object(&p).map_err(|e| match e {
                StoreError::NoSuchKey => StoreError::BadPart("a listed part was not uploaded"),
                other => other,
            })?;
            let h = Self::read_header(&mut f, &file)?;
            let meta = &h.meta;
            if let Some(want) = etag
                && want.trim_matches('"') != meta.etag
            {
                return Err(StoreError::BadPart("a part's ETag does not match the uploaded part"));
            }
            files.push((f, file, h.data_start, h.meta.size));
        }
        path.check()?;
        let dest = path.file(&self.root);
        let dir = dest.parent().unwrap_or(&self.root).to_path_buf();
        fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
        // The header holds the ETag, so hash first (a second pass writes).
        let mut md5 = Md5::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        for (f, file, _, _) in &mut files {
            loop {
                let n = f.read(&mut buf).map_err(io_err("read", file))?;
                if n == 0 {
                    break;
                }
                md5.update(&buf[..n]);
                size += n as u64;
            }
        }
        let etag = hex(&md5.finalize());
        let version_id = self.random_hex();
        let tmp = self.root.join(TMP_DIR).join(format!("{}.tmp", self.random_hex()));
        let written = (|| {
            let mut out = OpenOptions::new().write(true).create_new(true).open(&tmp).map_err(io_err("create", &tmp))?;
            out.write_all(MAGIC_MULTIPART).map_err(io_err("write", &tmp))?;
            out.write_all(etag.as_bytes()).map_err(io_err("write", &tmp))?;
            out.write_all(version_id.as_bytes()).map_err(io_err("write", &tmp))?;
            out.write_all(&(files.len() as u32).to_le_bytes()).map_err(io_err("write", &tmp))?;
            for (_, _, _, size) in &files {
                out.write_all(&size.to_le_bytes()).map_err(io_err("write", &tmp))?;
            }
            for (f, file, start, _) in &mut files {
                f.seek(SeekFrom::Start(*start)).map_err(io_err("seek", file))?;
                io::copy(f, &mut out).map_err(io_err("copy", file))?;
            }
            out.sync_all().map_err(io_err("fsync", &tmp))?;
            Ok(mtime(&out))
        })();
        let last_modified = match written {
            Ok(t) => t,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
        };
        if let Err(e) = fs::rename(&tmp, &dest) {
            let _ = fs::remove_file(&tmp);
            return Err(StoreError::Io { op: "rename", path: dest, source: e });
        }
        sync_dir(&dir)?;
        // The object is committed; the upload's parts go (all of them, also
        // those not listed, as S3 does).
        if let Some(upload) = part_path(1).file(&self.root).parent() {
            let _ = fs::remove_dir_all(upload);
            if let Some(u) = upload.parent() {
                let _ = fs::remove_dir(u);
            }
        }
        Ok(ObjectMeta { size, etag, version_id, last_modified })
    }
}

impl FsStore {
    /// The directory of upload `upload_id` of `path` (both checked).
    fn upload_dir(&self, path: &ObjectPath, upload_id: &str) -> Result<PathBuf, StoreError> {
        let p = ObjectPath { part: Some(Part { number: 1, upload_id: upload_id.to_string() }), ..path.clone() };
        p.check()?;
        let file = p.file(&self.root);
        Ok(file.parent().map(Path::to_path_buf).unwrap_or(file))
    }

    /// Collects `key -> file` of the objects under `dir` (key so far `at`).
    fn walk(
        &self,
        dir: &Path,
        at: &str,
        prefix: &str,
        out: &mut std::collections::BTreeMap<String, PathBuf>,
    ) -> Result<(), StoreError> {
        for e in fs::read_dir(dir).map_err(io_err("list", dir))? {
            let e = e.map_err(io_err("list", dir))?;
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let p = e.path();
            if let Some(seg) = name.strip_suffix(".d") {
                let sub = format!("{at}{seg}/");
                // Descend only where the prefix can still match.
                if sub.starts_with(prefix) || prefix.starts_with(&sub) {
                    self.walk(&p, &sub, prefix, out)?;
                }
            } else if let Some(seg) = name.strip_suffix(".o") {
                let key = format!("{at}{seg}");
                if key.starts_with(prefix) {
                    out.insert(key, p);
                }
            }
        }
        Ok(())
    }
}

/// The arguments of [`ObjectStore::complete_upload`] every store checks
/// the same way: an object path (no part), at least one part, part numbers
/// ascending and each once.
pub(crate) fn check_completion(path: &ObjectPath, parts: &[(u32, Option<String>)]) -> Result<(), StoreError> {
    if path.part.is_some() {
        return Err(StoreError::BadPart("the object path must not name a part"));
    }
    if parts.is_empty() {
        return Err(StoreError::BadPart("a completion needs at least one part"));
    }
    if parts.windows(2).any(|w| w[0].0 >= w[1].0) {
        return Err(StoreError::BadPart("part numbers must be ascending, each once"));
    }
    Ok(())
}

#[cfg(test)]
mod tests;

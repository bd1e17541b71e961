//! [`S3Store`]: see the parent module for the layout and the contract.

use std::fmt;
use std::future::Future;
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as S3Path;
use object_store::{
    Attribute, AttributeValue, Attributes, BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore as _,
    ObjectStoreExt as _, PutMode, PutMultipartOptions, PutOptions, PutPayload, RetryConfig, WriteMultipart,
};
use rand_core::RngCore;
use sha2::Sha256;

use super::super::{Listed, ObjectMeta, ObjectPath, ObjectStore, Part, PartMeta, StoreError, hex};
use super::{BUFFER_LIMIT, MAX_S3_KEY_LEN, S3Options};

const CHUNK: usize = 8 << 20;
const META_ETAG: &str = "rctb-etag";
const META_VERSION: &str = "rctb-version";
const META_PARTS: &str = "rctb-parts";
const INTERNAL: &str = ".rctb";

/// The object store in an S3 bucket (see the module docs).
pub struct S3Store {
    s3: Arc<AmazonS3>,
    rt: Option<tokio::runtime::Runtime>,
    rng: Mutex<Box<dyn RngCore + Send>>,
    name: String,
}

impl fmt::Debug for S3Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Store").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Drop for S3Store {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside an async context;
        // shutting it down in the background does not.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// An object's meta as the store keeps it, plus what S3 says of it.
struct Head {
    meta: ObjectMeta,
    /// S3's ETag (for `If-Match`).
    s3_etag: Option<String>,
    parts: usize,
}

fn attr(attrs: &Attributes, name: &'static str) -> Option<String> {
    attrs.get(&Attribute::Metadata(name.into())).map(|v| v.as_ref().to_string())
}

fn meta_of(m: &object_store::ObjectMeta, attrs: &Attributes) -> (ObjectMeta, usize) {
    let s3_etag = m.e_tag.as_deref().unwrap_or("").trim_matches('"').to_string();
    let meta = ObjectMeta {
        size: m.size,
        // An object another S3 client wrote has no rctb metadata: S3's
        // ETag, and no version id.
        etag: attr(attrs, META_ETAG).unwrap_or(s3_etag),
        version_id: attr(attrs, META_VERSION).unwrap_or_default(),
        last_modified: Some(SystemTime::from(m.last_modified)),
    };
    let parts = attr(attrs, META_PARTS).and_then(|p| p.parse().ok()).unwrap_or(1);
    (meta, parts)
}

impl S3Store {
    /// A store in `opts.bucket`, credentials from the environment
    /// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` or
    /// `AWS_DEFAULT_REGION`, default `us-east-1`). Nothing is sent yet
    /// ([`S3Store::check`] does). Version ids come from `rng`.
    pub fn connect(opts: &S3Options, rng: Box<dyn RngCore + Send>) -> Result<Self, StoreError> {
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&opts.bucket);
        let region = std::env::var("AWS_REGION").or_else(|_| std::env::var("AWS_DEFAULT_REGION"));
        b = b.with_region(region.unwrap_or_else(|_| "us-east-1".into()));
        if let Some((k, secret)) = &opts.credentials {
            b = b.with_access_key_id(k).with_secret_access_key(secret);
        } else if opts.endpoint.is_some() {
            // Not the instance-metadata chain towards a local server.
            return Err(StoreError::BadStore {
                field: "credentials",
                rule: "an S3 store at an endpoint needs an access key id and secret",
            });
        }
        if let Some(e) = &opts.endpoint {
            b = b.with_endpoint(e).with_allow_http(true).with_virtual_hosted_style_request(false);
        }
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(2),
                base: 2.0,
            },
            max_retries: opts.max_retries,
            retry_timeout: opts.retry_timeout,
        };
        let client = ClientOptions::new()
            .with_allow_http(opts.endpoint.is_some())
            .with_timeout(opts.request_timeout)
            .with_connect_timeout(opts.connect_timeout);
        let name = format!("S3 store s3://{} at {}", opts.bucket, opts.endpoint.as_deref().unwrap_or("AWS"));
        let s3 = b.with_retry(retry).with_client_options(client).build().map_err(|e| StoreError::Backend {
            store: name.clone(),
            op: "configure",
            key: String::new(),
            message: e.to_string(),
            unavailable: false,
        })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("rctb-s3store")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io { op: "start the S3 client runtime", path: PathBuf::new(), source })?;
        Ok(S3Store { s3: Arc::new(s3), rt: Some(rt), rng: Mutex::new(rng), name })
    }

    /// One request to prove the bucket answers (a HEAD of a key that need
    /// not exist).
    pub fn check(&self) -> Result<(), StoreError> {
        let s3 = self.s3.clone();
        let probe = S3Path::from_iter([INTERNAL, "probe"]);
        match self.run(async move { s3.head(&probe).await }) {
            Ok(_) => Ok(()),
            Err(e) => match self.err("HEAD", ".rctb/probe", e) {
                StoreError::NoSuchKey => Ok(()),
                other => Err(other),
            },
        }
    }

    /// What the store calls itself in errors (`S3 store s3://B at URL`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `fut` on the store's runtime and waits for it on this thread.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = object_store::Result<T>> + Send + 'static,
    ) -> object_store::Result<T> {
        let gone = || object_store::Error::Generic { store: "S3", source: "the S3 client runtime has stopped".into() };
        let Some(rt) = &self.rt else { return Err(gone()) };
        let (tx, rx) = mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| Err(gone()))
    }

    fn err(&self, op: &'static str, key: &str, e: object_store::Error) -> StoreError {
        match e {
            object_store::Error::NotFound { .. } => StoreError::NoSuchKey,
            other => StoreError::Backend {
                store: self.name.clone(),
                op,
                key: key.to_string(),
                // What failed on the way (a 5xx after its retries, a
                // timeout, a refused connection) may pass; a refusal
                // (denied, a precondition) will not.
                unavailable: matches!(other, object_store::Error::Generic { .. }) && !refused(&other.to_string()),
                message: other.to_string(),
            },
        }
    }

    fn random_hex(&self) -> String {
        let mut b = [0u8; 16];
        self.rng.lock().unwrap_or_else(|p| p.into_inner()).fill_bytes(&mut b);
        hex(&b)
    }

    /// The S3 key of an object (checked; `path.part` is ignored).
    fn object_key(path: &ObjectPath) -> Result<S3Path, StoreError> {
        ObjectPath { part: None, ..path.clone() }.check()?;
        let raw = format!("{}/{}", path.bucket, path.key);
        if raw.len() > MAX_S3_KEY_LEN {
            return Err(StoreError::BadKey("bucket/key is longer than the S3 store's 1024 bytes"));
        }
        S3Path::parse(&raw).map_err(|_| StoreError::BadKey("the S3 store refuses ASCII control characters"))
    }

    /// The S3 key of what `path` names: the object, or its upload's part.
    fn key(path: &ObjectPath) -> Result<S3Path, StoreError> {
        let key = Self::object_key(path)?;
        match &path.part {
            None => Ok(key),
            Some(p) => Self::part_key(path, p),
        }
    }

    /// `H`: the hash naming an object's uploads and part tables.
    fn hash(path: &ObjectPath) -> String {
        let mut named = Vec::with_capacity(path.bucket.len() + 1 + path.key.len());
        named.extend_from_slice(path.bucket.as_bytes());
        named.push(0);
        named.extend_from_slice(path.key.as_bytes());
        hex(&<Sha256 as sha2::Digest>::digest(&named)[..16])
    }

    fn upload_dir(path: &ObjectPath, upload_id: &str) -> Result<S3Path, StoreError> {
        let p = ObjectPath { part: Some(Part { number: 1, upload_id: upload_id.to_string() }), ..path.clone() };
        p.check()?;
        Ok(S3Path::from_iter([INTERNAL, "uploads", &Self::hash(path), upload_id]))
    }

    fn part_key(path: &ObjectPath, part: &Part) -> Result<S3Path, StoreError> {
        Ok(Self::upload_dir(path, &part.upload_id)?.join(format!("part-{:05}", part.number)))
    }

    fn table_key(path: &ObjectPath, version: &str) -> S3Path {
        S3Path::from_iter([INTERNAL, "parts", &Self::hash(path), version])
    }

    fn attributes(etag: &str, version: &str, parts: Option<usize>) -> Attributes {
        let mut a = Attributes::new();
        a.insert(Attribute::Metadata(META_ETAG.into()), AttributeValue::from(etag.to_string()));
        a.insert(Attribute::Metadata(META_VERSION.into()), AttributeValue::from(version.to_string()));
        if let Some(n) = parts {
            a.insert(Attribute::Metadata(META_PARTS.into()), AttributeValue::from(n.to_string()));
        }
        a
    }

    /// One PUT of `data` at `key` with our metadata.
    fn put_key(&self, key: &S3Path, data: Bytes, parts: Option<usize>) -> Result<ObjectMeta, StoreError> {
        let etag = hex(&Md5::digest(&data));
        let version_id = self.random_hex();
        let size = data.len() as u64;
        let opts = PutOptions { attributes: Self::attributes(&etag, &version_id, parts), ..Default::default() };
        let (s3, k) = (self.s3.clone(), key.clone());
        self.run(async move { s3.put_opts(&k, PutPayload::from_bytes(data), opts).await })
            .map_err(|e| self.err("PUT", key.as_ref(), e))?;
        Ok(ObjectMeta { size, etag, version_id, last_modified: None })
    }

    fn head_key(&self, key: &S3Path) -> Result<Head, StoreError> {
        let (s3, k) = (self.s3.clone(), key.clone());
        let r = self
            .run(async move { s3.get_opts(&k, GetOptions { head: true, ..Default::default() }).await })
            .map_err(|e| self.err("HEAD", key.as_ref(), e))?;
        let (meta, parts) = meta_of(&r.meta, &r.attributes);
        Ok(Head { meta, s3_etag: r.meta.e_tag.clone(), parts })
    }

    fn exists(&self, key: &S3Path) -> Result<bool, StoreError> {
        match self.head_key(key) {
            Ok(_) => Ok(true),
            Err(StoreError::NoSuchKey) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Bytes `range` of `key`, only if its S3 ETag is still `if_match`.
    fn get_range(
        &self,
        key: &S3Path,
        range: std::ops::Range<u64>,
        if_match: Option<String>,
    ) -> Result<(Bytes, object_store::ObjectMeta, Attributes), StoreError> {
        let (s3, k) = (self.s3.clone(), key.clone());
        let opts = GetOptions { range: Some(GetRange::Bounded(range)), if_match, ..Default::default() };
        self.run(async move {
            let r = s3.get_opts(&k, opts).await?;
            let (meta, attrs) = (r.meta.clone(), r.attributes.clone());
            Ok((r.bytes().await?, meta, attrs))
        })
        .map_err(|e| self.err("GET", key.as_ref(), e))
    }

    fn list_keys(&self, prefix: &S3Path) -> Result<Vec<object_store::ObjectMeta>, StoreError> {
        let (s3, p) = (self.s3.clone(), prefix.clone());
        self.run(async move {
            let mut out = Vec::new();
            let mut s = s3.list(Some(&p));
            while let Some(m) = s.next().await {
                out.push(m?);
            }
            Ok(out)
        })
        .map_err(|e| self.err("LIST", prefix.as_ref(), e))
    }

    fn delete_key(&self, key: &S3Path) -> Result<(), StoreError> {
        let (s3, k) = (self.s3.clone(), key.clone());
        match self.run(async move { s3.delete(&k).await }) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err("DELETE", key.as_ref(), e)),
        }
    }

    /// The marker of an upload, made if missing.
    fn ensure_upload(&self, marker: &S3Path) -> Result<(), StoreError> {
        let (s3, k) = (self.s3.clone(), marker.clone());
        let opts = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.run(async move { s3.put_opts(&k, PutPayload::from_static(b"upload"), opts).await }) {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) | Err(object_store::Error::Precondition { .. }) => {
                Ok(())
            }
            Err(e) => Err(self.err("PUT", marker.as_ref(), e)),
        }
    }

    fn head_object(&self, path: &ObjectPath) -> Result<(Head, Vec<u64>), StoreError> {
        path.check()?;
        let key = Self::object_key(path)?;
        let h = self.head_key(&key)?;
        if h.parts <= 1 {
            let size = h.meta.size;
            return Ok((h, vec![size]));
        }
        let table = Self::table_key(path, &h.meta.version_id);
        let corrupt = |why| StoreError::Corrupt { path: PathBuf::from(table.as_ref()), why };
        let (s3, t) = (self.s3.clone(), table.clone());
        let data = match self
            .run(async move { s3.get(&t).await?.bytes().await })
            .map_err(|e| self.err("GET", table.as_ref(), e))
        {
            Ok(d) => d,
            Err(StoreError::NoSuchKey) => return Err(corrupt("the part table of a multipart object is missing")),
            Err(e) => return Err(e),
        };
        let sizes: Option<Vec<u64>> =
            std::str::from_utf8(&data).ok().and_then(|s| s.split(',').map(|n| n.parse().ok()).collect());
        let sizes = sizes.ok_or(corrupt("the part table is not comma-separated sizes"))?;
        if sizes.len() != h.parts || sizes.iter().try_fold(0u64, |a, s| a.checked_add(*s)) != Some(h.meta.size) {
            return Err(corrupt("part sizes do not add up to the data"));
        }
        Ok((h, sizes))
    }

    /// Reads `buf.len()` bytes at `at` of the object that `h` describes.
    fn read_at(&self, key: &S3Path, h: &Head, at: u64, buf: &mut [u8]) -> Result<(), StoreError> {
        if buf.is_empty() {
            return Ok(());
        }
        let end = at + buf.len() as u64;
        let (data, _, _) = self.get_range(key, at..end, h.s3_etag.clone())?;
        if data.len() != buf.len() {
            return Err(StoreError::Backend {
                store: self.name.clone(),
                op: "GET",
                key: key.to_string(),
                message: format!("{} bytes answered for a range of {}", data.len(), buf.len()),
                unavailable: true,
            });
        }
        buf.copy_from_slice(&data);
        Ok(())
    }

    /// Reads `data` to its end: in memory, or spooled to a file past
    /// [`BUFFER_LIMIT`]; hashed on the way.
    fn collect(&self, key: &S3Path, data: &mut dyn Read) -> Result<Body, StoreError> {
        let read_err = |source| StoreError::Io { op: "read body for", path: PathBuf::from(key.as_ref()), source };
        let mut md5 = Md5::new();
        let mut mem = Vec::new();
        let mut spool: Option<Spool> = None;
        let mut size = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match data.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(read_err(e)),
            };
            md5.update(&buf[..n]);
            size += n as u64;
            if spool.is_none() && size > BUFFER_LIMIT {
                let mut s = Spool::new(&self.random_hex())?;
                s.write(&mem)?;
                mem = Vec::new();
                spool = Some(s);
            }
            match &mut spool {
                Some(s) => s.write(&buf[..n])?,
                None => mem.extend_from_slice(&buf[..n]),
            }
        }
        let etag = hex(&md5.finalize());
        Ok(match spool {
            None => Body::Mem(Bytes::from(mem)),
            Some(s) => Body::File(s, size, etag),
        })
    }

    /// Stores a collected body at `key` (one PUT, or a multipart upload
    /// from its spool file, completed only when all of it is in).
    fn put_body(&self, key: &S3Path, body: Body) -> Result<ObjectMeta, StoreError> {
        let (spool, size, etag) = match body {
            Body::Mem(b) => return self.put_key(key, b, None),
            Body::File(s, size, etag) => (s, size, etag),
        };
        let version_id = self.random_hex();
        let attributes = Self::attributes(&etag, &version_id, None);
        let mut file = spool.reopen()?;
        let (s3, k) = (self.s3.clone(), key.clone());
        let written = self.run(async move {
            let upload = s3.put_multipart_opts(&k, PutMultipartOptions { attributes, ..Default::default() }).await?;
            let mut w = WriteMultipart::new_with_chunk_size(upload, CHUNK);
            let mut chunk = vec![0u8; CHUNK];
            loop {
                // A local file read, on the store's own runtime thread.
                let n = match file.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        let _ = w.abort().await;
                        return Err(object_store::Error::Generic { store: "S3", source: Box::new(e) });
                    }
                };
                if let Err(e) = w.wait_for_capacity(2).await {
                    let _ = w.abort().await;
                    return Err(e);
                }
                w.write(&chunk[..n]);
            }
            w.finish().await.map(|_| ())
        });
        drop(spool);
        written.map_err(|e| self.err("PUT", key.as_ref(), e))?;
        Ok(ObjectMeta { size, etag, version_id, last_modified: None })
    }

    /// Streams `key`'s data (if still `if_match`) into `f`.
    fn for_each_chunk(
        &self,
        key: &S3Path,
        if_match: Option<String>,
        f: impl FnMut(Bytes) + Send + 'static,
    ) -> Result<(), StoreError> {
        let (s3, k) = (self.s3.clone(), key.clone());
        let mut f = f;
        self.run(async move {
            let r = s3.get_opts(&k, GetOptions { if_match, ..Default::default() }).await?;
            let mut s = r.into_stream();
            while let Some(b) = s.next().await {
                f(b?);
            }
            Ok(())
        })
        .map_err(|e| self.err("GET", key.as_ref(), e))
    }
}

/// A body collected for one PUT.
enum Body {
    /// In memory, with its MD5.
    Mem(Bytes),
    /// Spooled to a file: its size and MD5.
    File(Spool, u64, String),
}

/// A temporary file, removed when dropped.
struct Spool {
    path: PathBuf,
    file: std::fs::File,
}

impl Spool {
    fn new(name: &str) -> Result<Self, StoreError> {
        let path = std::env::temp_dir().join(format!("rctb-s3-{name}.spool"));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| StoreError::Io { op: "create", path: path.clone(), source })?;
        Ok(Spool { path, file })
    }

    fn write(&mut self, b: &[u8]) -> Result<(), StoreError> {
        std::io::Write::write_all(&mut self.file, b).map_err(|source| StoreError::Io {
            op: "write",
            path: self.path.clone(),
            source,
        })
    }

    fn reopen(&self) -> Result<std::fs::File, StoreError> {
        std::fs::File::open(&self.path).map_err(|source| StoreError::Io { op: "open", path: self.path.clone(), source })
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the server answered a 4xx other than 408 and 429 (it refused:
/// asking again will not help). object_store keeps the status in an error
/// type it does not export; its message carries it.
fn refused(message: &str) -> bool {
    const AT: &str = "status code: ";
    message.find(AT).is_some_and(|i| {
        let code = &message[i + AT.len()..];
        code.starts_with('4') && !code.starts_with("408") && !code.starts_with("429")
    })
}

fn part_of(sizes: &[u64], number: u32) -> Result<(u64, u64), StoreError> {
    let i = (number as usize).checked_sub(1).filter(|i| *i < sizes.len());
    let i = i.ok_or(StoreError::InvalidPartNumber { number, parts: sizes.len() })?;
    Ok((sizes[..i].iter().sum(), sizes[i]))
}

impl ObjectStore for S3Store {
    fn put(&self, path: &ObjectPath, data: &[u8]) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let key = match &path.part {
            None => Self::object_key(path)?,
            Some(p) => {
                // A part begins its upload (the client's own id), as on FsStore.
                Self::object_key(path)?;
                self.ensure_upload(&Self::upload_dir(path, &p.upload_id)?.join("upload"))?;
                Self::part_key(path, p)?
            }
        };
        self.put_key(&key, Bytes::copy_from_slice(data), None)
    }

    fn put_stream(&self, path: &ObjectPath, data: &mut dyn Read) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let key = Self::object_key(path)?;
        let marker = match &path.part {
            Some(p) => {
                let m = Self::upload_dir(path, &p.upload_id)?.join("upload");
                if !self.exists(&m)? {
                    return Err(StoreError::NoSuchUpload(p.upload_id.clone()));
                }
                Some((m, Self::part_key(path, p)?, p.upload_id.clone()))
            }
            None => None,
        };
        // The MD5 goes in the object's metadata, known only at the end:
        // a body is collected in memory up to BUFFER_LIMIT (one PUT), a
        // larger one spooled to a temporary file (an S3 multipart upload
        // completed at the end). A body that fails stores nothing.
        let body = self.collect(&key, data)?;
        let (meta, stored_at) = match &marker {
            None => (self.put_body(&key, body)?, key),
            Some((_, part_key, _)) => (self.put_body(part_key, body)?, part_key.clone()),
        };
        if let Some((m, _, id)) = marker
            && !self.exists(&m)?
        {
            // Aborted while the part arrived: it must not come back.
            self.delete_key(&stored_at)?;
            return Err(StoreError::NoSuchUpload(id));
        }
        Ok(meta)
    }

    fn create_upload(&self, path: &ObjectPath) -> Result<String, StoreError> {
        if path.part.is_some() {
            return Err(StoreError::BadPart("the object path must not name a part"));
        }
        Self::object_key(path)?;
        let id = self.random_hex();
        self.ensure_upload(&Self::upload_dir(path, &id)?.join("upload"))?;
        Ok(id)
    }

    fn has_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<bool, StoreError> {
        self.exists(&Self::upload_dir(path, upload_id)?.join("upload"))
    }

    fn list_parts(&self, path: &ObjectPath, upload_id: &str) -> Result<Vec<(u32, ObjectMeta)>, StoreError> {
        if !self.has_upload(path, upload_id)? {
            return Err(StoreError::NoSuchUpload(upload_id.to_string()));
        }
        let dir = Self::upload_dir(path, upload_id)?;
        let mut parts = Vec::new();
        for m in self.list_keys(&dir)? {
            let Some(n) = m.location.filename().and_then(|f| f.strip_prefix("part-")).and_then(|n| n.parse().ok())
            else {
                continue;
            };
            match self.head_key(&m.location) {
                Ok(h) => parts.push((n, h.meta)),
                Err(StoreError::NoSuchKey) => {} // completed or aborted meanwhile
                Err(e) => return Err(e),
            }
        }
        parts.sort_by_key(|(n, _)| *n);
        Ok(parts)
    }

    fn abort_upload(&self, path: &ObjectPath, upload_id: &str) -> Result<(), StoreError> {
        let dir = Self::upload_dir(path, upload_id)?;
        let marker = dir.clone().join("upload");
        if !self.exists(&marker)? {
            return Err(StoreError::NoSuchUpload(upload_id.to_string()));
        }
        // The marker first: a part arriving now finds no upload.
        self.delete_key(&marker)?;
        for m in self.list_keys(&dir)? {
            self.delete_key(&m.location)?;
        }
        Ok(())
    }

    fn read_range(&self, path: &ObjectPath, offset: u64, buf: &mut [u8]) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        let key = Self::key(path)?;
        let size = buf.len() as u64;
        let end = offset.checked_add(size);
        if buf.is_empty() || end.is_none() {
            let h = self.head_key(&key)?;
            if end.is_none_or(|e| e > h.meta.size) {
                return Err(StoreError::Range { offset, size, len: h.meta.size });
            }
            return Ok(h.meta);
        }
        let end = end.unwrap_or(u64::MAX);
        // S3 cuts a range at the object's end, and refuses one that
        // starts past it: either is our Range error.
        let (data, m, attrs) = match self.get_range(&key, offset..end, None) {
            Ok(r) => r,
            Err(StoreError::NoSuchKey) => return Err(StoreError::NoSuchKey),
            // A store that does not answer would not answer the HEAD either.
            Err(e @ StoreError::Backend { unavailable: true, .. }) => return Err(e),
            Err(e) => {
                let h = self.head_key(&key)?;
                if end > h.meta.size {
                    return Err(StoreError::Range { offset, size, len: h.meta.size });
                }
                return Err(e);
            }
        };
        if data.len() != buf.len() {
            return Err(StoreError::Range { offset, size, len: m.size });
        }
        buf.copy_from_slice(&data);
        Ok(meta_of(&m, &attrs).0)
    }

    fn head(&self, path: &ObjectPath) -> Result<ObjectMeta, StoreError> {
        path.check()?;
        Ok(self.head_key(&Self::key(path)?)?.meta)
    }

    fn head_part(&self, path: &ObjectPath, number: u32) -> Result<PartMeta, StoreError> {
        let (h, sizes) = self.head_object(path)?;
        let (start, size) = part_of(&sizes, number)?;
        Ok(PartMeta { object: h.meta, start, size, parts: sizes.len() })
    }

    fn read_part(&self, path: &ObjectPath, number: u32, offset: u64, buf: &mut [u8]) -> Result<PartMeta, StoreError> {
        let (h, sizes) = self.head_object(path)?;
        let (start, size) = part_of(&sizes, number)?;
        let len = buf.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(StoreError::Range { offset, size: len, len: size });
        }
        // If-Match: the bytes are of the version whose table was read.
        self.read_at(&Self::object_key(path)?, &h, start + offset, buf)?;
        Ok(PartMeta { object: h.meta, start, size, parts: sizes.len() })
    }

    fn delete(&self, path: &ObjectPath) -> Result<(), StoreError> {
        path.check()?;
        if path.part.is_some() {
            return Err(StoreError::BadPart("DELETE names an object, not a part"));
        }
        let key = Self::object_key(path)?;
        // S3's DELETE of nothing succeeds; ours is NoSuchKey.
        let h = self.head_key(&key)?;
        self.delete_key(&key)?;
        if h.parts > 1 {
            self.delete_key(&Self::table_key(path, &h.meta.version_id))?;
        }
        Ok(())
    }

    fn list(&self, bucket: &str, prefix: &str, max: usize) -> Result<(Vec<Listed>, bool), StoreError> {
        ObjectPath::new(bucket, "x")?;
        let full = format!("{bucket}/{prefix}");
        // object_store lists by whole segments: list the prefix's
        // directory and keep the keys that start with it.
        let dir = full.rsplit_once('/').map_or(bucket, |(d, _)| d);
        let dir =
            S3Path::parse(dir).map_err(|_| StoreError::BadKey("the S3 store refuses ASCII control characters"))?;
        let mut keys: Vec<String> = self
            .list_keys(&dir)?
            .into_iter()
            .map(|m| m.location.to_string())
            .filter(|k| k.starts_with(&full))
            .collect();
        keys.sort();
        let truncated = keys.len() > max;
        let mut out = Vec::new();
        // ListObjectsV2 has no user metadata: a HEAD each.
        for k in keys.into_iter().take(max) {
            let key = k[bucket.len() + 1..].to_string();
            match self.head_key(&S3Path::from(k.as_str())) {
                Ok(h) => out.push(Listed { key, meta: h.meta }),
                Err(StoreError::NoSuchKey) => {} // deleted meanwhile
                Err(e) => return Err(e),
            }
        }
        Ok((out, truncated))
    }

    fn complete_upload(
        &self,
        path: &ObjectPath,
        upload_id: &str,
        parts: &[(u32, Option<String>)],
    ) -> Result<ObjectMeta, StoreError> {
        crate::store::check_completion(path, parts)?;
        let key = Self::object_key(path)?;
        if !self.has_upload(path, upload_id)? {
            return Err(StoreError::NoSuchUpload(upload_id.to_string()));
        }
        // Check every part (and its ETag) before writing anything.
        let mut found = Vec::new();
        for (n, etag) in parts {
            let p = Part { number: *n, upload_id: upload_id.to_string() };
            ObjectPath { part: Some(p.clone()), ..path.clone() }.check()?;
            let pk = Self::part_key(path, &p)?;
            let h = self.head_key(&pk).map_err(|e| match e {
                StoreError::NoSuchKey => StoreError::BadPart("a listed part was not uploaded"),
                other => other,
            })?;
            if let Some(want) = etag
                && want.trim_matches('"') != h.meta.etag
            {
                return Err(StoreError::BadPart("a part's ETag does not match the uploaded part"));
            }
            found.push((pk, h));
        }
        let total: u64 = found.iter().map(|(_, h)| h.meta.size).sum();
        let sizes: Vec<String> = found.iter().map(|(_, h)| h.meta.size.to_string()).collect();
        let version_id = self.random_hex();
        // The ETag (MD5 of the whole data) goes in the metadata, so it is
        // known before the object is written: hash first, keeping the data
        // when it is small enough.
        let md5 = Arc::new(Mutex::new(Md5::new()));
        let kept = Arc::new(Mutex::new(Vec::new()));
        let keep = total <= BUFFER_LIMIT;
        for (pk, h) in &found {
            let (md5, kept) = (md5.clone(), kept.clone());
            self.for_each_chunk(pk, h.s3_etag.clone(), move |b| {
                md5.lock().unwrap_or_else(|p| p.into_inner()).update(&b);
                if keep {
                    kept.lock().unwrap_or_else(|p| p.into_inner()).push(b);
                }
            })?;
        }
        let etag = hex(&md5.lock().unwrap_or_else(|p| p.into_inner()).clone().finalize());
        let count = found.len();
        // The part table first: the object that names it comes after.
        if count > 1 {
            let table = Self::table_key(path, &version_id);
            let (s3, t) = (self.s3.clone(), table.clone());
            let body = PutPayload::from(sizes.join(","));
            self.run(async move { s3.put(&t, body).await }).map_err(|e| self.err("PUT", table.as_ref(), e))?;
        }
        let attributes = Self::attributes(&etag, &version_id, Some(count));
        let written = if keep {
            let chunks = std::mem::take(&mut *kept.lock().unwrap_or_else(|p| p.into_inner()));
            let payload: PutPayload = chunks.into_iter().collect();
            let (s3, k) = (self.s3.clone(), key.clone());
            let opts = PutOptions { attributes, ..Default::default() };
            self.run(async move { s3.put_opts(&k, payload, opts).await }).map(|_| ())
        } else {
            let (s3, k) = (self.s3.clone(), key.clone());
            let sources: Vec<(S3Path, Option<String>)> =
                found.iter().map(|(pk, h)| (pk.clone(), h.s3_etag.clone())).collect();
            // An S3 multipart upload, completed only when every byte is in:
            // an error aborts it and nothing is visible.
            self.run(async move {
                let opts = PutMultipartOptions { attributes, ..Default::default() };
                let upload = s3.put_multipart_opts(&k, opts).await?;
                let mut w = WriteMultipart::new_with_chunk_size(upload, CHUNK);
                let copied: object_store::Result<()> = async {
                    for (pk, if_match) in &sources {
                        let r =
                            s3.get_opts(pk, GetOptions { if_match: if_match.clone(), ..Default::default() }).await?;
                        let mut s = r.into_stream();
                        while let Some(b) = s.next().await {
                            w.wait_for_capacity(2).await?;
                            w.put(b?);
                        }
                    }
                    Ok(())
                }
                .await;
                match copied {
                    Ok(()) => w.finish().await.map(|_| ()),
                    Err(e) => {
                        let _ = w.abort().await;
                        Err(e)
                    }
                }
            })
        };
        if let Err(e) = written {
            if count > 1 {
                let _ = self.delete_key(&Self::table_key(path, &version_id));
            }
            return Err(self.err("PUT", key.as_ref(), e));
        }
        // The object is committed; the upload goes (all its parts, also
        // those not listed, as S3 does).
        let dir = Self::upload_dir(path, upload_id)?;
        let _ = self.delete_key(&dir.clone().join("upload"));
        if let Ok(left) = self.list_keys(&dir) {
            for m in left {
                let _ = self.delete_key(&m.location);
            }
        }
        Ok(ObjectMeta { size: total, etag, version_id, last_modified: None })
    }
}

use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;

use super::*;

fn store(dir: &Path) -> FsStore {
    FsStore::open(dir, Box::new(ChaCha8Rng::seed_from_u64(7))).unwrap()
}

fn obj(target: &str) -> ObjectPath {
    ObjectPath::from_target(target).unwrap()
}

/// Every file under `dir` (relative), sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[test]
fn put_get_head_range() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let p = obj("/bk/dir/sub/obj%20one.bin");
    assert_eq!(p.key, "dir/sub/obj one.bin");
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    let m = s.put(&p, &data).unwrap();
    assert_eq!(m.size, 10_000);
    assert_eq!(m.etag, hex(&Md5::digest(&data)));
    assert_eq!(m.version_id.len(), 32);
    assert_eq!(s.head(&p).unwrap(), m);
    let mut buf = vec![0u8; 100];
    assert_eq!(s.read_range(&p, 9_900, &mut buf).unwrap(), m);
    assert_eq!(buf, data[9_900..]);
    let mut all = vec![0u8; 10_000];
    s.read_range(&p, 0, &mut all).unwrap();
    assert_eq!(all, data);
    // Past the end, by one byte, and an overflowing offset.
    let mut one = [0u8; 1];
    assert!(matches!(
        s.read_range(&p, 10_000, &mut one),
        Err(StoreError::Range { offset: 10_000, size: 1, len: 10_000 })
    ));
    assert!(matches!(s.read_range(&p, u64::MAX, &mut one), Err(StoreError::Range { .. })));
    assert_eq!(files(dir.path()), ["bk/dir.d/sub.d/obj one.bin.o"]);
}

#[test]
fn md5_etag_of_known_values() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    // `printf '' | md5sum`, `printf abc | md5sum`
    assert_eq!(s.put(&obj("/b0/empty"), b"").unwrap().etag, "d41d8cd98f00b204e9800998ecf8427e");
    assert_eq!(s.put(&obj("/b0/abc"), b"abc").unwrap().etag, "900150983cd24fb0d6963f7d28e17f72");
    assert_eq!(s.head(&obj("/b0/empty")).unwrap().size, 0);
}

#[test]
fn overwrite_gives_a_new_version_and_keys_do_not_collide() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let a = obj("/bk/a");
    let ab = obj("/bk/a/b");
    let m1 = s.put(&a, b"first").unwrap();
    let m2 = s.put(&a, b"second!").unwrap();
    assert_ne!(m1.version_id, m2.version_id);
    assert_ne!(m1.etag, m2.etag);
    // "a" and "a/b" are both objects (S3 allows it), and "a.d" or "a.o" as
    // keys are yet other objects.
    s.put(&ab, b"under a").unwrap();
    s.put(&obj("/bk/a.d"), b"x").unwrap();
    s.put(&obj("/bk/a.o"), b"y").unwrap();
    let mut buf = vec![0u8; 7];
    s.read_range(&a, 0, &mut buf).unwrap();
    assert_eq!(buf, b"second!");
    let mut buf = vec![0u8; 7];
    s.read_range(&ab, 0, &mut buf).unwrap();
    assert_eq!(buf, b"under a");
    assert_eq!(s.head(&obj("/bk/a.d")).unwrap().size, 1);
    assert!(matches!(s.head(&obj("/bk/nope")), Err(StoreError::NoSuchKey)));
    assert!(matches!(s.head(&obj("/bk/a/b/c")), Err(StoreError::NoSuchKey)));
    assert!(matches!(s.head(&obj("/other/a")), Err(StoreError::NoSuchKey)));
}

#[test]
fn parts_are_stored_apart_from_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let p1 = obj("/bk/big?partNumber=1&uploadId=up-1");
    let p2 = obj("/bk/big?partNumber=2&uploadId=up-1");
    assert_eq!(p1.part, Some(Part { number: 1, upload_id: "up-1".into() }));
    s.put(&p1, b"one").unwrap();
    s.put(&p2, b"two!").unwrap();
    assert!(matches!(s.head(&obj("/bk/big")), Err(StoreError::NoSuchKey)));
    assert_eq!(s.head(&p2).unwrap().size, 4);
    assert_eq!(files(dir.path()), ["bk/big.u/up-1/1", "bk/big.u/up-1/2"]);
}

const PART_RULE: &str =
    "query key 'partNumber': must be a decimal number 1..=10000, and within the server's part limit";
const UPLOAD_RULE: &str = "query key 'uploadId': letters, digits and - _ . ~ + = only, not starting with .";

#[test]
fn bad_keys_are_typed_errors_and_touch_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let cases: &[(&str, &str)] = &[
        ("/bk/../etc/passwd", "key: must not have a . or .. segment"),
        ("/bk/a/%2e%2e/b", "key: must not have a . or .. segment"),
        ("/bk/./a", "key: must not have a . or .. segment"),
        ("/bk/%2Fetc", "key: must not be absolute (start with /)"),
        ("/bk/a%2F%2E%2E%2Fb", "key: must not have a . or .. segment"),
        ("/bk/%2E%2E%2Fetc", "key: must not have a . or .. segment"),
        ("/bk/a%2F", "key: must not have an empty segment (//, or a trailing /)"),
        ("/bk/a%zz", "key: malformed percent-encoding (% must be followed by two hex digits)"),
        ("/bk//etc", "key: must not be absolute (start with /)"),
        ("/bk/a//b", "key: must not have an empty segment (//, or a trailing /)"),
        ("/bk/a/", "key: must not have an empty segment (//, or a trailing /)"),
        ("/bk/a%00b", "key: must not contain NUL"),
        ("/bk/%ff", "key: not UTF-8 after percent-decoding"),
        ("/..", "key: the target must be /bucket/key"),
        ("bk/a", "key: the target must start with /"),
        ("/../a", "bucket: must start with a letter or digit"),
        ("/.tmp/a", "bucket: must start with a letter or digit"),
        ("/a%2Fb/c", "bucket: only lowercase letters, digits, '-' and '.'"),
        ("/%2e%2e/a", "bucket: must start with a letter or digit"),
        ("/.b/a", "bucket: must start with a letter or digit"),
        ("/Bk/a", "bucket: only lowercase letters, digits, '-' and '.'"),
        ("//a", "bucket: must be 1..=63 bytes"),
        ("/bk/a?partNumber=0&uploadId=u", PART_RULE),
        ("/bk/a?partNumber=10001&uploadId=u", PART_RULE),
        ("/bk/a?partNumber=1&uploadId=..", UPLOAD_RULE),
        ("/bk/a?partNumber=1&uploadId=a%2Fb", UPLOAD_RULE),
        ("/bk/a?partNumber=1", "query key 'uploadId': UploadPart needs uploadId beside partNumber"),
        ("/bk/a?acl=1", "query key 'acl': only partNumber and uploadId are allowed"),
        ("/bk/a?partNumber=-1&uploadId=u", PART_RULE),
    ];
    for (target, want) in cases {
        let e = ObjectPath::from_target(target).expect_err(target);
        assert_eq!(e.to_string(), *want, "{target}");
    }
    let long = format!("/bk/{}", "k".repeat(254));
    assert_eq!(ObjectPath::from_target(&long).unwrap_err().to_string(), "key: a segment is longer than 253 bytes");
    assert!(ObjectPath::from_target(&format!("/bk/{}", "k".repeat(253))).is_ok());
    // ObjectPath::new checks too: an absolute key, NUL.
    assert_eq!(
        ObjectPath::new("bk", "/etc/passwd").unwrap_err().to_string(),
        "key: must not be absolute (start with /)"
    );
    assert_eq!(ObjectPath::new("bk", "a\0").unwrap_err().to_string(), "key: must not contain NUL");
    assert_eq!(ObjectPath::new("bk", "").unwrap_err().to_string(), "key: must not be empty");
    // A hand-built path that skipped the checks is refused by the store.
    let forged = ObjectPath { bucket: "bk".into(), key: "../../x".into(), part: None };
    assert!(matches!(s.put(&forged, b"x"), Err(StoreError::BadKey(_))));
    assert!(matches!(s.head(&forged), Err(StoreError::BadKey(_))));
    assert!(matches!(s.read_range(&forged, 0, &mut [0u8; 1]), Err(StoreError::BadKey(_))));
    assert!(files(dir.path()).is_empty());
}

#[test]
fn a_crash_mid_put_leaves_no_partial_object() {
    let dir = tempfile::tempdir().unwrap();
    let p = obj("/bk/obj");
    let old = vec![1u8; 4096];
    let new = vec![2u8; 8192];
    {
        let s = store(dir.path());
        let m_old = s.put(&p, &old).unwrap();
        // Crash while writing the new version: the old one stays, whole.
        s.fail_next_put_after(3000);
        assert!(matches!(s.put(&p, &new), Err(StoreError::Io { op: "write", .. })));
        assert_eq!(s.head(&p).unwrap(), m_old);
        let mut buf = vec![0u8; 4096];
        s.read_range(&p, 0, &mut buf).unwrap();
        assert_eq!(buf, old);
        // A crash of the first PUT of a key: nothing visible at all.
        s.fail_next_put_after(10);
        assert!(matches!(s.put(&obj("/bk/fresh"), &new), Err(StoreError::Io { op: "write", .. })));
        assert!(matches!(s.head(&obj("/bk/fresh")), Err(StoreError::NoSuchKey)));
        // The killed writes left their temporaries behind...
        assert_eq!(files(dir.path()).iter().filter(|f| f.starts_with(".tmp/")).count(), 2);
    }
    // ...which a restart removes; the objects are as before the crashes.
    let s = store(dir.path());
    assert_eq!(files(dir.path()), ["bk/obj.o"]);
    let mut buf = vec![0u8; 4096];
    s.read_range(&p, 0, &mut buf).unwrap();
    assert_eq!(buf, old);
    // And the store works after the restart.
    assert_eq!(s.put(&p, &new).unwrap().size, 8192);
}

#[test]
fn a_foreign_file_is_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    fs::create_dir_all(dir.path().join("bk")).unwrap();
    fs::write(dir.path().join("bk/short.o"), b"HOBJ").unwrap();
    fs::write(dir.path().join("bk/magic.o"), [b'x'; 80]).unwrap();
    assert!(matches!(s.head(&obj("/bk/short")), Err(StoreError::Corrupt { why: "shorter than its header", .. })));
    assert!(matches!(s.head(&obj("/bk/magic")), Err(StoreError::Corrupt { why: "bad magic", .. })));
}

#[test]
fn delete_and_list() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    for k in ["a/b/c", "a/b/d", "a/e", "f", "a.d/x"] {
        s.put(&ObjectPath::new("bk", k).unwrap(), k.as_bytes()).unwrap();
    }
    let keys = |prefix: &str, max: usize| {
        let (l, more) = s.list("bk", prefix, max).unwrap();
        (l.into_iter().map(|o| o.key).collect::<Vec<_>>(), more)
    };
    assert_eq!(keys("", 100), (vec!["a.d/x".into(), "a/b/c".into(), "a/b/d".into(), "a/e".into(), "f".into()], false));
    assert_eq!(keys("a/b", 100), (vec!["a/b/c".to_string(), "a/b/d".into()], false));
    assert_eq!(keys("a/", 1), (vec!["a/b/c".to_string()], true));
    let (l, _) = s.list("bk", "f", 10).unwrap();
    assert_eq!(l[0].meta, s.head(&ObjectPath::new("bk", "f").unwrap()).unwrap());
    assert_eq!(s.list("empty", "", 10).unwrap(), (Vec::new(), false));
    assert!(matches!(s.list("BAD", "", 10), Err(StoreError::BadBucket(_))));

    s.delete(&ObjectPath::new("bk", "a/b/c").unwrap()).unwrap();
    assert!(matches!(s.head(&ObjectPath::new("bk", "a/b/c").unwrap()), Err(StoreError::NoSuchKey)));
    assert!(matches!(s.delete(&ObjectPath::new("bk", "a/b/c").unwrap()), Err(StoreError::NoSuchKey)));
    assert!(matches!(s.delete(&ObjectPath::new("bk", "nope/x").unwrap()), Err(StoreError::NoSuchKey)));
    assert_eq!(keys("a/b", 100).0, vec!["a/b/d".to_string()]);
}

#[test]
fn completing_an_upload_concatenates_its_parts_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let part = |n: u32, data: &[u8]| s.put(&obj(&format!("/bk/big?partNumber={n}&uploadId=up1")), data).unwrap();
    let m1 = part(1, b"hello ");
    let _m2 = part(2, b"unused ");
    let m3 = part(3, b"world");
    let dest = obj("/bk/big");
    // Refusals change nothing.
    assert!(matches!(s.complete_upload(&dest, "up1", &[]), Err(StoreError::BadPart(_))));
    assert!(matches!(s.complete_upload(&dest, "up1", &[(3, None), (1, None)]), Err(StoreError::BadPart(_))));
    assert!(matches!(s.complete_upload(&dest, "up1", &[(1, None), (4, None)]), Err(StoreError::BadPart(_))));
    assert!(matches!(
        s.complete_upload(&dest, "up1", &[(1, Some(m3.etag.clone())), (3, None)]),
        Err(StoreError::BadPart("a part's ETag does not match the uploaded part"))
    ));
    assert!(matches!(s.head(&dest), Err(StoreError::NoSuchKey)));
    let m = s.complete_upload(&dest, "up1", &[(1, Some(format!("\"{}\"", m1.etag))), (3, Some(m3.etag))]).unwrap();
    let mut got = vec![0u8; 11];
    assert_eq!(s.read_range(&dest, 0, &mut got).unwrap(), m);
    assert_eq!(&got, b"hello world");
    assert_eq!(m.etag, hex(&Md5::digest(b"hello world")));
    // The parts are gone, nothing else is left.
    assert_eq!(files(dir.path()), ["bk/big.o"]);
    // The upload is gone with its parts.
    assert!(matches!(s.complete_upload(&dest, "up1", &[(1, None)]), Err(StoreError::NoSuchUpload(u)) if u == "up1"));
}

#[test]
fn put_stream_stores_what_it_reads_and_nothing_when_the_reader_fails() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let p = obj("/bk/s/big");
    // Across the 1 MiB copy buffer.
    let data: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i * 7 % 251) as u8).collect();
    let m = s.put_stream(&p, &mut &data[..]).unwrap();
    assert_eq!((m.size, m.etag.clone()), (data.len() as u64, hex(&Md5::digest(&data))));
    assert_eq!(s.head(&p).unwrap(), m);
    let mut got = vec![0u8; data.len()];
    s.read_range(&p, 0, &mut got).unwrap();
    assert!(got == data);
    // A reader that fails half-way (a client that hung up): the old object
    // stays, no temporary is left.
    struct Broken(usize);
    impl std::io::Read for Broken {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.0 == 0 {
                return Err(std::io::Error::other("gone"));
            }
            let n = buf.len().min(self.0);
            buf[..n].fill(1);
            self.0 -= n;
            Ok(n)
        }
    }
    assert!(matches!(s.put_stream(&p, &mut Broken(2 << 20)), Err(StoreError::Io { .. })));
    assert_eq!(s.head(&p).unwrap(), m);
    assert_eq!(files(dir.path()), ["bk/s.d/big.o"]);
    // Empty.
    let e = s.put_stream(&obj("/bk/empty"), &mut &b""[..]).unwrap();
    assert_eq!((e.size, e.etag.as_str()), (0, "d41d8cd98f00b204e9800998ecf8427e"));
}

#[test]
fn uploads_are_created_listed_and_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let dest = obj("/bk/up");
    let id = s.create_upload(&dest).unwrap();
    assert_ne!(id, s.create_upload(&dest).unwrap());
    assert!(s.has_upload(&dest, &id).unwrap());
    assert!(!s.has_upload(&dest, "nope").unwrap());
    assert_eq!(s.list_parts(&dest, &id).unwrap(), []);
    let part = |n: u32, data: &[u8]| s.put(&obj(&format!("/bk/up?partNumber={n}&uploadId={id}")), data).unwrap();
    let m2 = part(2, b"two");
    let m10 = part(10, b"ten");
    assert_eq!(s.list_parts(&dest, &id).unwrap(), [(2, m2), (10, m10)]);
    assert!(matches!(s.list_parts(&dest, "nope"), Err(StoreError::NoSuchUpload(_))));
    assert!(matches!(s.abort_upload(&dest, "nope"), Err(StoreError::NoSuchUpload(_))));
    assert!(matches!(s.complete_upload(&dest, "nope", &[(1, None)]), Err(StoreError::NoSuchUpload(_))));
    assert!(matches!(s.abort_upload(&dest, "../x"), Err(StoreError::BadQuery { .. })));
    s.abort_upload(&dest, &id).unwrap();
    assert!(!s.has_upload(&dest, &id).unwrap());
    assert!(matches!(s.abort_upload(&dest, &id), Err(StoreError::NoSuchUpload(_))));
    assert!(matches!(s.create_upload(&obj("/bk/up?partNumber=1&uploadId=x")), Err(StoreError::BadPart(_))));
    // A streamed part needs its upload: an aborted one does not come back.
    let late = obj(&format!("/bk/up?partNumber=3&uploadId={id}"));
    assert!(matches!(s.put_stream(&late, &mut &b"late"[..]), Err(StoreError::NoSuchUpload(u)) if u == id));
    // Nothing of the aborted upload is left (the other created one is).
    let left = files(dir.path());
    assert!(left.iter().all(|f| !f.contains(&id)), "{left:?}");
    assert!(!dir.path().join("bk/up.u").join(&id).exists());
}

#[test]
fn a_completed_upload_keeps_its_part_table_for_get_part() {
    let dir = tempfile::tempdir().unwrap();
    let s = store(dir.path());
    let parts: [&[u8]; 3] = [b"first ", b"", b"third part"];
    for (i, data) in parts.iter().enumerate() {
        s.put(&obj(&format!("/bk/m?partNumber={}&uploadId=u%2Bv", i + 1)), data).unwrap();
    }
    let dest = obj("/bk/m");
    let m = s.complete_upload(&dest, "u+v", &[(1, None), (2, None), (3, None)]).unwrap();
    assert_eq!(s.head(&dest).unwrap(), m);
    for (i, data) in parts.iter().enumerate() {
        let n = i as u32 + 1;
        let head = s.head_part(&dest, n).unwrap();
        let start: usize = parts[..i].iter().map(|p| p.len()).sum();
        assert_eq!((head.start, head.size, head.parts), (start as u64, data.len() as u64, 3), "part {n}");
        assert_eq!(head.object, m);
        let mut buf = vec![0u8; data.len()];
        s.read_part(&dest, n, 0, &mut buf).unwrap();
        assert_eq!(&buf, data, "part {n}");
    }
    let mut tail = [0u8; 4];
    s.read_part(&dest, 3, 6, &mut tail).unwrap();
    assert_eq!(&tail, b"part");
    assert!(matches!(s.read_part(&dest, 3, 7, &mut tail), Err(StoreError::Range { offset: 7, size: 4, len: 10 })));
    assert!(matches!(s.head_part(&dest, 4), Err(StoreError::InvalidPartNumber { number: 4, parts: 3 })));
    assert!(matches!(s.head_part(&dest, 0), Err(StoreError::InvalidPartNumber { number: 0, .. })));
    // A plain object is one part; overwriting the multipart object with a
    // plain PUT drops its table.
    s.put(&dest, b"plain").unwrap();
    let head = s.head_part(&dest, 1).unwrap();
    assert_eq!((head.start, head.size, head.parts), (0, 5, 1));
    assert!(matches!(s.head_part(&dest, 2), Err(StoreError::InvalidPartNumber { number: 2, parts: 1 })));
    // A part table that does not add up is corrupt, not a panic.
    let mut bad = b"HOBM".to_vec();
    bad.extend_from_slice(&[b'0'; 64]);
    bad.extend_from_slice(&2u32.to_le_bytes());
    bad.extend_from_slice(&5u64.to_le_bytes());
    bad.extend_from_slice(&u64::MAX.to_le_bytes());
    bad.extend_from_slice(b"12345");
    fs::write(dir.path().join("bk/bad.o"), &bad).unwrap();
    assert!(matches!(
        s.head(&obj("/bk/bad")),
        Err(StoreError::Corrupt { why: "part sizes do not add up to the data", .. })
    ));
    bad.truncate(68 + 4 + 8);
    fs::write(dir.path().join("bk/bad.o"), &bad).unwrap();
    assert!(matches!(s.head(&obj("/bk/bad")), Err(StoreError::Corrupt { why: "shorter than its part table", .. })));
}

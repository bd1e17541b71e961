"""An ordinary S3 client against `rctb object serve`: boto3 with SigV4 over
plain HTTP puts, gets (whole, ranged, one part), lists and deletes
objects, and runs multipart uploads (upload_file / download_file with a
small threshold, and the low-level calls with their refusals), checking
every byte. The gateway keeps objects in its FsStore; the RDMA routes of
the same gateway read and write the same objects (gateway/tests/http.rs).

Skips, saying why, without boto3 or without an rctb binary
(cargo build -p rctb, or RCTB_BIN)."""

import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

try:
    import boto3
    from boto3.s3.transfer import TransferConfig
    from botocore.config import Config
    from botocore.exceptions import ClientError
except ImportError as e:  # a clear skip, not a collection error
    pytest.skip("boto3 is not installed (pip install boto3): %s" % e, allow_module_level=True)

ROOT = pathlib.Path(__file__).resolve().parents[3]
ACCESS, SECRET = "AKBOTO", "botosecret"
MiB = 1 << 20


def rctb_binary():
    target = os.environ.get("CARGO_TARGET_DIR")
    candidates = [os.environ.get("RCTB_BIN")]
    if target:
        candidates += [pathlib.Path(target) / "debug" / "rctb", pathlib.Path(target) / "release" / "rctb"]
    candidates += [ROOT / "target" / "debug" / "rctb", ROOT / "target" / "release" / "rctb", shutil.which("rctb")]
    for c in candidates:
        if c and pathlib.Path(c).is_file():
            return str(c)
    return None


@pytest.fixture(scope="module")
def gateway():
    binary = rctb_binary()
    if binary is None:
        pytest.skip("no rctb binary (cargo build -p rctb, or set RCTB_BIN)")
    work = tempfile.mkdtemp(prefix="rctb-s3-")
    users = pathlib.Path(work) / "users.toml"
    users.write_text('[[user]]\naccess_key = "%s"\nsecret_key = "%s"\n' % (ACCESS, SECRET))
    root = pathlib.Path(work) / "root"
    proc = subprocess.Popen(
        [binary, "object", "serve", "--root", str(root), "--listen", "127.0.0.1:0", "--backend", "sim",
         "--users", str(users), "--max-object-size", str(64 * MiB)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = proc.stdout.readline()
        m = re.match(r"listening on (\S+)", line)
        if not m:
            proc.kill()
            raise AssertionError("rctb object serve did not start: %r %s" % (line, proc.stderr.read()))
        yield {"endpoint": "http://" + m.group(1), "root": root}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


def client(gw, secret=SECRET):
    return boto3.client(
        "s3", endpoint_url=gw["endpoint"], region_name="us-east-1",
        aws_access_key_id=ACCESS, aws_secret_access_key=secret,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def data(n, seed):
    out = bytearray()
    block = hashlib.sha256(b"%d" % seed).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def code(exc):
    return exc.value.response["Error"]["Code"], exc.value.response["ResponseMetadata"]["HTTPStatusCode"]


def test_put_get_range_list_delete(gateway):
    s3 = client(gateway)
    small = b"hello, world"
    big = data(3 * MiB + 5, 1)  # well past the old 64 KiB body limit
    for key, body in (("small.txt", small), ("dir/big.bin", big), ("empty", b"")):
        r = s3.put_object(Bucket="bk", Key=key, Body=body)
        assert r["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), key
        got = s3.get_object(Bucket="bk", Key=key)
        assert got["Body"].read() == body, key
        assert got["ContentLength"] == len(body)
        assert got["ETag"] == r["ETag"]
        assert got["VersionId"] == r["VersionId"]
    # A PUT with a CRC32 checksum (boto3 sends one by default).
    s3.put_object(Bucket="bk", Key="crc", Body=small, ChecksumAlgorithm="CRC32")
    assert s3.get_object(Bucket="bk", Key="crc")["Body"].read() == small
    # Ranges: a-b, a-, -n, b past the end (truncated).
    n = len(big)
    for spec, want, first, last in (
        ("bytes=0-9", big[:10], 0, 9),
        ("bytes=%d-" % (n - 100), big[-100:], n - 100, n - 1),
        ("bytes=-5", big[-5:], n - 5, n - 1),
        ("bytes=%d-%d" % (MiB - 3, 2 * MiB + 3), big[MiB - 3:2 * MiB + 4], MiB - 3, 2 * MiB + 3),
        ("bytes=%d-%d" % (n - 2, n + 100), big[-2:], n - 2, n - 1),
        ("bytes=-%d" % (n + 7), big, 0, n - 1),
    ):
        r = s3.get_object(Bucket="bk", Key="dir/big.bin", Range=spec)
        assert r["ResponseMetadata"]["HTTPStatusCode"] == 206, spec
        assert r["ContentRange"] == "bytes %d-%d/%d" % (first, last, n), spec
        assert r["Body"].read() == want, spec
    for spec in ("bytes=%d-" % n, "bytes=-0"):
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="bk", Key="dir/big.bin", Range=spec)
        assert code(e) == ("InvalidRange", 416), spec
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="bk", Key="empty", Range="bytes=0-0")
    assert code(e) == ("InvalidRange", 416)
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket="bk", Key="nope")
    assert code(e) == ("NoSuchKey", 404)
    # A key of characters that need encoding in a path and in a listing.
    odd = "dir/a+b c%\u00fc&<x>.txt"
    s3.put_object(Bucket="bk", Key=odd, Body=b"odd")
    assert s3.get_object(Bucket="bk", Key=odd)["Body"].read() == b"odd"
    head = s3.head_object(Bucket="bk", Key="small.txt")
    assert head["ContentLength"] == len(small) and head["LastModified"].year >= 2026
    listed = s3.list_objects_v2(Bucket="bk")["Contents"]
    keys = [o["Key"] for o in listed]
    assert keys == ["crc", "dir/a+b c%\u00fc&<x>.txt", "dir/big.bin", "empty", "small.txt"]
    assert all(o["LastModified"].year >= 2026 for o in listed)
    assert [o["Size"] for o in listed] == [len(small), 3, len(big), 0, len(small)]
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="bk", Prefix="dir/b")["Contents"]] == ["dir/big.bin"]
    top = s3.list_objects_v2(Bucket="bk", Delimiter="/")
    assert [o["Key"] for o in top["Contents"]] == ["crc", "empty", "small.txt"]
    assert top["CommonPrefixes"] == [{"Prefix": "dir/"}]
    for key in keys:
        s3.delete_object(Bucket="bk", Key=key)
    assert "Contents" not in s3.list_objects_v2(Bucket="bk")


def test_upload_file_and_download_file_multipart(gateway, tmp_path):
    s3 = client(gateway)
    body = data(12 * MiB + 123, 2)
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    src.write_bytes(body)
    # s3transfer's smallest part is 5 MiB: three parts (5, 5, 2 MiB).
    cfg = TransferConfig(multipart_threshold=1 * MiB, multipart_chunksize=5 * MiB, max_concurrency=3)
    s3.upload_file(str(src), "bk", "multi/file.bin", Config=cfg)
    head = s3.head_object(Bucket="bk", Key="multi/file.bin")
    assert head["ContentLength"] == len(body)
    # download_file reads it back in ranged GETs.
    s3.download_file("bk", "multi/file.bin", str(dst), Config=cfg)
    assert dst.read_bytes() == body
    # GetPart: part 2 of the completed upload.
    r = s3.get_object(Bucket="bk", Key="multi/file.bin", PartNumber=2)
    assert r["PartsCount"] == 3
    assert r["Body"].read() == body[5 * MiB:10 * MiB]
    # No part files are left behind.
    left = [p for p in gateway["root"].rglob("*") if p.is_file() and ".u" in str(p.relative_to(gateway["root"]))]
    assert left == []
    s3.delete_object(Bucket="bk", Key="multi/file.bin")


def test_multipart_calls_and_their_refusals(gateway):
    s3 = client(gateway)
    up = s3.create_multipart_upload(Bucket="bk", Key="mp")["UploadId"]
    p1, p2 = data(5 * MiB, 3), data(1000, 4)
    e1 = s3.upload_part(Bucket="bk", Key="mp", UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = s3.upload_part(Bucket="bk", Key="mp", UploadId=up, PartNumber=2, Body=p2)["ETag"]
    listed = s3.list_parts(Bucket="bk", Key="mp", UploadId=up)["Parts"]
    assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in listed] == [(1, e1, len(p1)), (2, e2, len(p2))]
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket="bk", Key="mp", UploadId=up, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e1}]})
    assert code(e) == ("InvalidPart", 400)
    s3.complete_multipart_upload(Bucket="bk", Key="mp", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert s3.get_object(Bucket="bk", Key="mp")["Body"].read() == p1 + p2
    # The upload is gone: its id is unknown now.
    with pytest.raises(ClientError) as e:
        s3.upload_part(Bucket="bk", Key="mp", UploadId=up, PartNumber=3, Body=b"x")
    assert code(e) == ("NoSuchUpload", 404)
    # Abort drops an upload and its parts; a second abort knows none.
    up2 = s3.create_multipart_upload(Bucket="bk", Key="mp2")["UploadId"]
    s3.upload_part(Bucket="bk", Key="mp2", UploadId=up2, PartNumber=1, Body=b"gone")
    s3.abort_multipart_upload(Bucket="bk", Key="mp2", UploadId=up2)
    with pytest.raises(ClientError) as e:
        s3.abort_multipart_upload(Bucket="bk", Key="mp2", UploadId=up2)
    assert code(e) == ("NoSuchUpload", 404)
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket="bk", Key="mp2")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    s3.delete_object(Bucket="bk", Key="mp")


def test_a_wrong_secret_and_an_oversize_body_are_refused(gateway):
    with pytest.raises(ClientError) as e:
        client(gateway, secret="wrong").put_object(Bucket="bk", Key="x", Body=b"x")
    assert code(e) == ("SignatureDoesNotMatch", 403)
    with pytest.raises(ClientError) as e:
        client(gateway).put_object(Bucket="bk", Key="huge", Body=b"\0" * (64 * MiB + 1))
    assert code(e) == ("EntityTooLarge", 400)
    with pytest.raises(ClientError) as e:
        client(gateway).head_object(Bucket="bk", Key="huge")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    leftovers = list((gateway["root"] / ".tmp").iterdir())
    assert leftovers == []


def test_the_aws_chunked_form_boto3_sends_over_tls(gateway, monkeypatch, tmp_path):
    """Over TLS boto3 sends PutObject and UploadPart as aws-chunked bodies
    with an unsigned CRC32 trailer (STREAMING-UNSIGNED-PAYLOAD-TRAILER);
    over plain HTTP it signs the payload instead. botocore chooses by the
    URL's scheme, so telling it the URL is https gets the TLS form here."""
    import botocore.httpchecksum as hc

    real = hc.urlparse
    monkeypatch.setattr(hc, "urlparse", lambda url, *a, **k: real(url, *a, **k)._replace(scheme="https"))
    s3 = client(gateway)
    seen = []

    def record(request, **_):
        seen.append((request.headers.get("x-amz-content-sha256"), request.headers.get("x-amz-trailer")))

    s3.meta.events.register("before-send.s3.PutObject", record)
    s3.meta.events.register("before-send.s3.UploadPart", record)
    body = data(3 * MiB + 7, 5)
    s3.put_object(Bucket="bk", Key="chunked", Body=body)
    assert seen == [(b"STREAMING-UNSIGNED-PAYLOAD-TRAILER", b"x-amz-checksum-crc32")]
    assert s3.get_object(Bucket="bk", Key="chunked")["Body"].read() == body
    src, dst = tmp_path / "src.bin", tmp_path / "dst.bin"
    big = data(11 * MiB, 6)
    src.write_bytes(big)
    cfg = TransferConfig(multipart_threshold=1 * MiB, multipart_chunksize=5 * MiB)
    s3.upload_file(str(src), "bk", "chunked-multi", Config=cfg)
    assert len(seen) == 1 + 3 and all(s == b"STREAMING-UNSIGNED-PAYLOAD-TRAILER" for s, _ in seen)
    s3.download_file("bk", "chunked-multi", str(dst), Config=cfg)
    assert dst.read_bytes() == big
    for key in ("chunked", "chunked-multi"):
        s3.delete_object(Bucket="bk", Key=key)

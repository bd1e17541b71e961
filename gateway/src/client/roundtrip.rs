//! [`roundtrip`]: many objects PUT then GET back through several clients
//! at once and compared byte for byte (`rctb object roundtrip`).

use std::sync::Arc;
use std::time::Duration as StdDuration;

use bytes::Bytes;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use super::{NoProgress, ObjectClient};

/// What [`roundtrip`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RoundtripReport {
    /// Objects put and got back.
    pub objects: usize,
    /// Their bytes.
    pub bytes: u64,
    /// Keys whose GET differed from their PUT (or failed), with why.
    pub failures: Vec<(String, String)>,
    /// READYs answered BUSY, over all transfers.
    pub busy_retries: u32,
    /// Wall time of the PUT phase ...
    pub put_time: StdDuration,
    /// ... and of the GET phase.
    pub get_time: StdDuration,
}

#[allow(clippy::disallowed_methods)] // phase times for the report: wall time by definition
fn wall_now() -> std::time::Instant {
    std::time::Instant::now()
}

/// PUTs `count` objects of sizes drawn from `seed` (0, 1, then 1..=max_size
/// bytes of seeded random data) under `bucket/prefix/N`, object N through
/// client N mod `clients.len()` (the clients run concurrently); then GETs
/// each back the same way and compares it byte for byte, and its ETag
/// with the PUT's.
pub async fn roundtrip(
    clients: &[Arc<ObjectClient>],
    bucket: &str,
    prefix: &str,
    count: usize,
    max_size: u64,
    seed: u64,
) -> RoundtripReport {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut objects = Vec::new();
    for i in 0..count {
        let size = match i {
            0 => 0,
            1 => 1,
            _ => 1 + rng.next_u64() % max_size.max(1),
        };
        let mut data = vec![0u8; size as usize];
        rng.fill_bytes(&mut data);
        objects.push((format!("{prefix}/{i}"), Bytes::from(data)));
    }
    let n = clients.len().max(1);
    let mut report = RoundtripReport::default();
    // PUT phase.
    let start = wall_now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let mine: Vec<(String, Bytes)> = objects.iter().skip(c).step_by(n).cloned().collect();
        let (client, bucket) = (client.clone(), bucket.to_string());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for (key, data) in mine {
                let r = client.put(&bucket, &key, data.clone(), &NoProgress).await;
                out.push((key, data, r));
            }
            out
        }));
    }
    let mut stored = Vec::new();
    for t in tasks {
        for (key, data, r) in t.await.unwrap_or_default() {
            match r {
                Ok(t) => {
                    report.busy_retries += t.busy_retries;
                    stored.push((key, data, t.etag));
                }
                Err(e) => report.failures.push((key, format!("PUT: {e}"))),
            }
        }
    }
    report.put_time = start.elapsed();
    // GET phase (sizes are known: no HeadObject but for the empty object).
    let start = wall_now();
    let mut tasks = Vec::new();
    for (c, client) in clients.iter().enumerate() {
        let mine: Vec<(String, Bytes, String)> = stored.iter().skip(c).step_by(n).cloned().collect();
        let (client, bucket) = (client.clone(), bucket.to_string());
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for (key, data, etag) in mine {
                let r = if data.is_empty() {
                    client.get(&bucket, &key, &NoProgress).await
                } else {
                    client.get_range(&bucket, &key, 0, data.len() as u64, &NoProgress).await
                };
                out.push((key, data, etag, r));
            }
            out
        }));
    }
    for t in tasks {
        for (key, data, etag, r) in t.await.unwrap_or_default() {
            match r {
                Ok((got, t)) if got == data && t.etag == etag => {
                    report.objects += 1;
                    report.bytes += data.len() as u64;
                    report.busy_retries += t.busy_retries;
                }
                Ok((got, t)) => report.failures.push((
                    key,
                    format!("GET: {} bytes, etag {}; PUT {} bytes, etag {etag}", got.len(), t.etag, data.len()),
                )),
                Err(e) => report.failures.push((key, format!("GET: {e}"))),
            }
        }
    }
    report.get_time = start.elapsed();
    report
}

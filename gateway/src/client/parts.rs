//! Multipart objects from the client: parts uploaded over RC with
//! UploadPart targets (`?partNumber=N&uploadId=U`), completed with S3's
//! CompleteMultipartUpload, and read back one part at a time with GetPart
//! targets (`?partNumber=N`, S3 GetObject partNumber semantics). The
//! gateway advertises these with `x-amz-rdma-capabilities: mp`.

use bytes::Bytes;
use percent_encoding::utf8_percent_encode;

use super::{ControlPlane, ObjectClient, ObjectError, ObjectInfo, Progress, SEGMENT, Transferred, target};

/// `/bucket/key?partNumber=N`: part N of a completed object (GetPart).
pub fn part_target(bucket: &str, key: &str, number: u32) -> String {
    format!("{}?partNumber={number}", target(bucket, key))
}

/// `/bucket/key?partNumber=N&uploadId=U`: part N of upload U (UploadPart),
/// the upload id percent-encoded.
pub fn upload_part_target(bucket: &str, key: &str, upload_id: &str, number: u32) -> String {
    format!("{}?partNumber={number}&uploadId={}", target(bucket, key), utf8_percent_encode(upload_id, SEGMENT))
}

/// HeadObject of one part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartInfo {
    /// The part's size.
    pub size: u64,
    /// How many parts the object has (`x-amz-mp-parts-count`).
    pub parts: u32,
    /// The part's size (again) and the whole object's ETag and version id.
    pub object: ObjectInfo,
}

impl ControlPlane {
    /// HeadObject with `?partNumber=N`.
    pub async fn head_part(&self, bucket: &str, key: &str, number: u32) -> Result<PartInfo, ObjectError> {
        let path = part_target(bucket, key, number);
        let a = self.request("HEAD", &path, Vec::new(), Bytes::new()).await?;
        if a.status != 200 {
            let code = match a.status {
                404 => "NoSuchKey",
                416 => "InvalidPartNumber",
                _ => "",
            };
            return Err(ObjectError::Http {
                route: format!("HEAD {path}"),
                status: a.status,
                code: code.into(),
                message: "HeadObject of a part failed".into(),
                capabilities: None,
            });
        }
        let num = |name: &str| -> Result<u64, ObjectError> {
            a.required(name)?.parse().map_err(|e| ObjectError::Reply(format!("{name}: {e}")))
        };
        let size = num("content-length")?;
        let parts = u32::try_from(num("x-amz-mp-parts-count")?)
            .map_err(|e| ObjectError::Reply(format!("x-amz-mp-parts-count: {e}")))?;
        Ok(PartInfo {
            size,
            parts,
            object: ObjectInfo {
                size,
                etag: a.header("etag").unwrap_or("").trim_matches('"').to_string(),
                version_id: a.header("x-amz-version-id").unwrap_or("").to_string(),
            },
        })
    }

    /// CompleteMultipartUpload of `parts` (number, ETag), ascending.
    pub async fn complete_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        parts: &[(u32, String)],
    ) -> Result<ObjectInfo, ObjectError> {
        let path = format!("{}?uploadId={}", target(bucket, key), utf8_percent_encode(upload_id, SEGMENT));
        let mut body = String::from("<CompleteMultipartUpload>");
        for (n, etag) in parts {
            body.push_str(&format!("<Part><PartNumber>{n}</PartNumber><ETag>\"{etag}\"</ETag></Part>"));
        }
        body.push_str("</CompleteMultipartUpload>");
        let a = self.request("POST", &path, Vec::new(), Bytes::from(body)).await?;
        if a.status != 200 {
            return Err(a.into_error(&format!("POST {path}")));
        }
        Ok(ObjectInfo {
            size: 0,
            etag: a.xml_field("ETag").replace("&quot;", "").trim_matches('"').to_string(),
            version_id: a.xml_field("VersionId"),
        })
    }
}

impl ObjectClient {
    /// Uploads `data` (1 byte or more) as part `number` of upload
    /// `upload_id` of `bucket/key`, over RC.
    pub async fn put_part(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        number: u32,
        data: Bytes,
        progress: &dyn Progress,
    ) -> Result<Transferred, ObjectError> {
        if data.is_empty() {
            return Err(ObjectError::BadPath("an uploaded part moves over RDMA: 1 byte or more".into()));
        }
        self.put_target(upload_part_target(bucket, key, upload_id, number), data, progress).await
    }

    /// Reads part `number` of `bucket/key` whole (its size from HeadObject
    /// with the part number), over RC.
    pub async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        progress: &dyn Progress,
    ) -> Result<(Vec<u8>, Transferred), ObjectError> {
        let info = self.cp.head_part(bucket, key, number).await?;
        if info.size == 0 {
            let t = Transferred {
                size: 0,
                etag: info.object.etag,
                version_id: info.object.version_id,
                busy_retries: 0,
                capabilities: None,
            };
            return Ok((Vec::new(), t));
        }
        self.get_target(part_target(bucket, key, number), 0, info.size, progress).await
    }
}

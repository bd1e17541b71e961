//! [`ControlPlane`]: the HTTP side of the gateway client. One kept-alive
//! connection to the gateway; every request SigV4-signed (`auth::sign`);
//! PREPARE, READY (BUSY as [`ReadyAnswer::Busy`]), CANCEL, HeadObject and
//! the inline PutObject of empty objects. Errors are [`ObjectError`]s: the
//! gateway's status and S3 code, or the connection's failure.

use super::*;

/// The HTTP control plane of one gateway: one kept-alive connection,
/// every request signed.
pub struct ControlPlane {
    endpoint: Endpoint,
    creds: Credentials,
    clock: Clock,
    conn: tokio::sync::Mutex<Option<SendRequest<Full<Bytes>>>>,
    /// The last `x-amz-rdma-capabilities` the gateway sent.
    capabilities: Mutex<Option<String>>,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane").field("endpoint", &self.endpoint).field("creds", &self.creds).finish()
    }
}

/// Characters a target segment keeps as they are (S3's unreserved set).
pub(super) const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// `/bucket/key`, each segment percent-encoded.
pub fn target(bucket: &str, key: &str) -> String {
    let mut t = format!("/{}", utf8_percent_encode(bucket, SEGMENT));
    for seg in key.split('/') {
        t.push('/');
        t.extend(utf8_percent_encode(seg, SEGMENT));
    }
    t
}

/// Splits `s3://bucket/key`.
pub fn parse_s3_url(url: &str) -> Result<(String, String), ObjectError> {
    let rest =
        url.strip_prefix("s3://").ok_or_else(|| ObjectError::BadPath(format!("{url:?}: must be s3://bucket/key")))?;
    match rest.split_once('/') {
        Some((b, k)) if !b.is_empty() && !k.is_empty() => Ok((b.to_string(), k.to_string())),
        _ => Err(ObjectError::BadPath(format!("{url:?}: must be s3://bucket/key"))),
    }
}

impl ControlPlane {
    /// Requests to `endpoint`, signed with `creds` at `clock`'s time.
    pub fn new(endpoint: Endpoint, creds: Credentials, clock: Clock) -> Self {
        ControlPlane { endpoint, creds, clock, conn: tokio::sync::Mutex::new(None), capabilities: Mutex::new(None) }
    }

    /// The capabilities the gateway last advertised (`x-amz-rdma-capabilities`,
    /// sent on READY's answers), if it did.
    pub fn capabilities(&self) -> Option<String> {
        self.capabilities.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the gateway advertised multipart (`mp`): UploadPart and
    /// GetPart targets.
    pub fn multipart(&self) -> bool {
        self.capabilities().is_some_and(|c| c.split(',').any(|t| t.trim() == CAPABILITIES.1))
    }

    /// The gateway it talks to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// What signs its requests.
    pub fn credentials(&self) -> &Credentials {
        &self.creds
    }

    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, ObjectError> {
        let addr = &self.endpoint.authority;
        let stream = TcpStream::connect(addr.as_str())
            .await
            .map_err(|source| ObjectError::Connect { addr: addr.clone(), source })?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| ObjectError::Transport(e.to_string()))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// Sends one signed request and reads the whole answer.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        headers: Vec<(String, String)>,
        body: Bytes,
    ) -> Result<Answer, ObjectError> {
        let mut h: Vec<(String, String)> = vec![("host".into(), self.endpoint.authority.clone())];
        h.extend(headers);
        let signed = auth::sign(&self.creds.user, &self.creds.region, (self.clock)(), method, path, &h, &body)
            .map_err(ObjectError::Sign)?;
        h.extend(signed);
        let mut req = hyper::Request::builder().method(method).uri(path);
        for (k, v) in &h {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(Full::new(body)).map_err(|e| ObjectError::Transport(e.to_string()))?;
        let mut conn = self.conn.lock().await;
        let mut sender = match conn.take() {
            Some(s) if !s.is_closed() => s,
            _ => self.connect().await?,
        };
        sender.ready().await.map_err(|e| ObjectError::Transport(e.to_string()))?;
        let resp = sender.send_request(req).await.map_err(|e| ObjectError::Transport(e.to_string()))?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| v.to_str().ok().map(|v| (k.as_str().to_string(), v.to_string())))
            .collect();
        let body = if method == "HEAD" {
            Bytes::new()
        } else {
            resp.into_body().collect().await.map_err(|e| ObjectError::Transport(e.to_string()))?.to_bytes()
        };
        *conn = Some(sender);
        let a = Answer { status, headers, body };
        if let Some(c) = a.capabilities() {
            *self.capabilities.lock().unwrap_or_else(|p| p.into_inner()) = Some(c.to_string());
        }
        Ok(a)
    }

    /// PREPARE; the reply as the session API has it.
    pub async fn prepare(&self, h: &PrepareHeaders) -> Result<PrepareReply, ObjectError> {
        let route = "/.hipobj-rc/prepare";
        let a = self.request("POST", route, h.to_headers(), Bytes::new()).await?;
        if a.status != 200 {
            return Err(a.into_error(route));
        }
        let bad = |name: &str, e: String| ObjectError::Reply(format!("{name}: {e}"));
        let hex = |name: &str| -> Result<u64, ObjectError> {
            u64::from_str_radix(a.required(name)?, 16).map_err(|e| bad(name, e.to_string()))
        };
        let opt_hex = |name: &str| -> Result<u64, ObjectError> {
            a.header(name).map_or(Ok(0), |v| u64::from_str_radix(v, 16).map_err(|e| bad(name, e.to_string())))
        };
        let reply = a.required("x-amz-rdma-reply")?;
        let token = reply.strip_prefix("200:").ok_or_else(|| bad("x-amz-rdma-reply", "must start with 200:".into()))?;
        let reply_token = if token.bytes().all(|c| c == b'0') {
            None
        } else {
            Some(RdmaToken::from_hex(token).map_err(|e| bad("x-amz-rdma-reply", e.to_string()))?)
        };
        let server_qpn = hex("x-amz-rdma-qpn")?;
        Ok(PrepareReply {
            session: SessionId::parse(a.required("x-amz-rdma-session")?)
                .map_err(|e| bad("x-amz-rdma-session", e.to_string()))?,
            server_qpn: u32::try_from(server_qpn).map_err(|e| bad("x-amz-rdma-qpn", e.to_string()))?,
            server_psn: parse_psn(a.required("x-amz-rdma-psn")?).map_err(|e| bad("x-amz-rdma-psn", e.to_string()))?,
            staging_addr: opt_hex("x-amz-rdma-mr-addr")?,
            staging_rkey: u32::try_from(opt_hex("x-amz-rdma-mr-rkey")?)
                .map_err(|e| bad("x-amz-rdma-mr-rkey", e.to_string()))?,
            reply_token,
        })
    }

    /// READY (blocks until the data phase ends).
    pub async fn ready(&self, r: &ReadyRequest) -> Result<ReadyAnswer, ObjectError> {
        let route = "/.hipobj-rc/ready";
        let h = ReadyHeaders {
            session: r.session,
            cookie: r.cookie,
            qpn: r.client_qpn,
            mr_addr: r.client_mr_addr,
            mr_rkey: r.client_mr_rkey,
        };
        let a = self.request("POST", route, h.to_headers(), Bytes::new()).await?;
        if a.status == 409 && a.xml_field("Message") == BUSY_MESSAGE {
            return Ok(ReadyAnswer::Busy);
        }
        if a.status != 200 {
            return Err(a.into_error(route));
        }
        let bytes = a
            .required("x-amz-rdma-bytes-transferred")?
            .parse()
            .map_err(|e| ObjectError::Reply(format!("x-amz-rdma-bytes-transferred: {e}")))?;
        Ok(ReadyAnswer::Ok {
            bytes,
            etag: a.header("x-amz-rdma-etag").map(str::to_string),
            version_id: a.header("x-amz-rdma-version-id").map(str::to_string),
            capabilities: a.capabilities().map(str::to_string),
        })
    }

    /// CANCEL (a session already gone is fine).
    pub async fn cancel(&self, session: SessionId) -> Result<(), ObjectError> {
        let route = "/.hipobj-rc/cancel";
        let a = self.request("POST", route, CancelHeaders { session }.to_headers(), Bytes::new()).await?;
        if a.status != 200 {
            return Err(a.into_error(route));
        }
        Ok(())
    }

    /// HeadObject.
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectInfo, ObjectError> {
        let path = target(bucket, key);
        let a = self.request("HEAD", &path, Vec::new(), Bytes::new()).await?;
        if a.status != 200 {
            let code = if a.status == 404 { "NoSuchKey" } else { "" };
            return Err(ObjectError::Http {
                route: format!("HEAD {path}"),
                status: a.status,
                code: code.into(),
                message: "HeadObject failed".into(),
                capabilities: None,
            });
        }
        let size =
            a.required("content-length")?.parse().map_err(|e| ObjectError::Reply(format!("content-length: {e}")))?;
        Ok(ObjectInfo {
            size,
            etag: a.header("etag").unwrap_or("").trim_matches('"').to_string(),
            version_id: a.header("x-amz-version-id").unwrap_or("").to_string(),
        })
    }

    /// PutObject with the data in the body (any size up to the gateway's
    /// `--max-object-size`; large objects move faster over RC).
    pub async fn put_inline(&self, bucket: &str, key: &str, data: Bytes) -> Result<ObjectInfo, ObjectError> {
        let path = target(bucket, key);
        let size = data.len() as u64;
        let a = self.request("PUT", &path, Vec::new(), data).await?;
        if a.status != 200 {
            return Err(a.into_error(&format!("PUT {path}")));
        }
        Ok(ObjectInfo {
            size,
            etag: a.header("etag").unwrap_or("").trim_matches('"').to_string(),
            version_id: a.header("x-amz-version-id").unwrap_or("").to_string(),
        })
    }
}

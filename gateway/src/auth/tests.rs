use super::*;

fn users() -> Users {
    Users::parse(
        "users.toml",
        "[[user]]\naccess_key = \"AKADMIN\"\nsecret_key = \"adminsecret\"\nadmin = true\n\n[[user]]\naccess_key = \"AKUSER\"\nsecret_key = \"usersecret\"\n",
    )
    .unwrap()
}

fn t0() -> SystemTime {
    parse_amz_date("20261129T120000Z").unwrap()
}

fn signed(ak: &str, sk: &str, at: SystemTime, uri: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut h: Vec<(String, String)> = vec![("host".into(), "127.0.0.1:8080".into())];
    h.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let user = User { access_key: ak.into(), secret_key: sk.into(), admin: false };
    let add = sign(&user, "us-east-1", at, "POST", uri, &h, b"").unwrap();
    h.extend(add);
    h
}

fn check(h: &[(String, String)], uri: &str, now: SystemTime) -> Result<Principal, AuthError> {
    verify(&users(), "us-east-1", now, "POST", uri, h, b"")
}

#[test]
fn a_signed_request_verifies_with_its_principal() {
    let h = signed("AKUSER", "usersecret", t0(), "/.hipobj-rc/prepare", &[("x-amz-rdma-op", "GET")]);
    let p = check(&h, "/.hipobj-rc/prepare", t0()).unwrap();
    assert_eq!(p.access_key, "AKUSER");
    assert!(!p.admin);
    assert_eq!(p.id, PrincipalId::from_credentials("AKUSER", "usersecret"));
    assert!(check(&signed("AKADMIN", "adminsecret", t0(), "/rc-sessions", &[]), "/rc-sessions", t0()).unwrap().admin);
}

#[test]
fn wrong_secret_tampering_and_scope_are_refused() {
    let uri = "/.hipobj-rc/prepare";
    let bad = signed("AKUSER", "wrong", t0(), uri, &[]);
    assert_eq!(check(&bad, uri, t0()), Err(AuthError::Signature));
    // A signed header changed after signing.
    let mut h = signed("AKUSER", "usersecret", t0(), uri, &[("x-amz-rdma-size", "10")]);
    h.iter_mut().find(|(k, _)| k == "x-amz-rdma-size").unwrap().1 = "11".into();
    assert_eq!(check(&h, uri, t0()), Err(AuthError::Signature));
    // Another path.
    let h = signed("AKUSER", "usersecret", t0(), uri, &[]);
    assert_eq!(check(&h, "/.hipobj-rc/cancel", t0()), Err(AuthError::Signature));
    // A signed header dropped.
    let mut h = signed("AKUSER", "usersecret", t0(), uri, &[("x-amz-rdma-size", "10")]);
    h.retain(|(k, _)| k != "x-amz-rdma-size");
    assert_eq!(check(&h, uri, t0()), Err(AuthError::MissingSignedHeader("x-amz-rdma-size".into())));
    // Unknown key, no header, another region.
    assert_eq!(check(&signed("AKNOBODY", "x", t0(), uri, &[]), uri, t0()), Err(AuthError::UnknownKey));
    assert_eq!(check(&[("host".into(), "h".into())], uri, t0()), Err(AuthError::Missing));
    let h = signed("AKUSER", "usersecret", t0(), uri, &[]);
    assert_eq!(verify(&users(), "eu-west-1", t0(), "POST", uri, &h, b""), Err(AuthError::Scope("wrong region")));
    // A body that is not the one signed.
    assert_eq!(verify(&users(), "us-east-1", t0(), "POST", uri, &h, b"x"), Err(AuthError::PayloadHash));
}

#[test]
fn fifteen_minutes_of_skew_either_way() {
    let uri = "/.hipobj-rc/ready";
    let h = signed("AKUSER", "usersecret", t0(), uri, &[]);
    let m15 = Duration::from_secs(15 * 60);
    assert!(check(&h, uri, t0() + m15).is_ok());
    assert!(check(&h, uri, t0() - m15).is_ok());
    assert_eq!(check(&h, uri, t0() + m15 + Duration::from_secs(1)), Err(AuthError::Skewed));
    assert_eq!(check(&h, uri, t0() - m15 - Duration::from_secs(1)), Err(AuthError::Skewed));
}

#[test]
fn malformed_authorization_headers() {
    let uri = "/x";
    let base = signed("AKUSER", "usersecret", t0(), uri, &[]);
    let with_auth = |v: &str| {
        let mut h = base.clone();
        h.iter_mut().find(|(k, _)| k == "authorization").unwrap().1 = v.into();
        check(&h, uri, t0())
    };
    assert_eq!(with_auth("AWS AKUSER:sig"), Err(AuthError::Malformed("the algorithm must be AWS4-HMAC-SHA256")));
    assert_eq!(
        with_auth("AWS4-HMAC-SHA256 Credential=AKUSER/20261129/us-east-1/s3/aws4_request, Signature=00"),
        Err(AuthError::Malformed("needs Credential, SignedHeaders and Signature"))
    );
    assert_eq!(
        with_auth(
            "AWS4-HMAC-SHA256 Credential=AKUSER/20261128/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"
        ),
        Err(AuthError::Scope("the date is not x-amz-date's"))
    );
    assert_eq!(
        with_auth(
            "AWS4-HMAC-SHA256 Credential=AKUSER/20261129/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=00"
        ),
        Err(AuthError::Scope("the service must be s3"))
    );
    assert_eq!(
        with_auth(
            "AWS4-HMAC-SHA256 Credential=AKUSER/20261129/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
        ),
        Err(AuthError::Malformed("SignedHeaders must include host and x-amz-date"))
    );
}

#[test]
fn users_files() {
    assert!(matches!(Users::parse("f", ""), Err(UsersError::Empty { .. })));
    assert!(matches!(Users::parse("f", "[[user]]\naccess_key = \"a\"\n"), Err(UsersError::Toml { .. })));
    assert!(matches!(
        Users::parse("f", "[[user]]\naccess_key = \"a\"\nsecret_key = \"s\"\nadmn = true\n"),
        Err(UsersError::Toml { .. })
    ));
    let dup = "[[user]]\naccess_key = \"a\"\nsecret_key = \"s\"\n[[user]]\naccess_key = \"a\"\nsecret_key = \"t\"\n";
    assert!(matches!(Users::parse("f", dup), Err(UsersError::Duplicate { .. })));
    assert!(matches!(
        Users::parse("f", "[[user]]\naccess_key = \"\"\nsecret_key = \"s\"\n"),
        Err(UsersError::Blank { index: 0, .. })
    ));
    let env = Users::from_env(Some("AK".into()), Some("SK".into())).unwrap();
    assert!(env.get("AK").unwrap().admin);
    assert!(matches!(Users::from_env(Some("AK".into()), None), Err(UsersError::NoEnv)));
    assert!(!format!("{:?}", users().get("AKUSER").unwrap()).contains("usersecret"));
}

/// AWS's published examples of S3 header-based SigV4 (the Amazon S3 API
/// Reference, "Signature Calculations for the Authorization Header:
/// Transferring Payload in a Single Chunk", its Examples section): the
/// example credentials, requests and the signatures AWS computed for them.
/// An external check of the verifier: the other tests sign with this
/// crate's own signer, on the same library and settings.
mod aws_s3_examples {
    use super::*;

    const ACCESS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
    const SECRET_KEY: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const DATE: &str = "20130524T000000Z";
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn example_users() -> Users {
        Users::new([User { access_key: ACCESS_KEY.into(), secret_key: SECRET_KEY.into(), admin: false }])
    }

    fn request(signed_headers: &str, signature: &str, headers: &[(&str, &str)]) -> Vec<(String, String)> {
        let auth = format!(
            "AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/20130524/us-east-1/s3/aws4_request,SignedHeaders={signed_headers},Signature={signature}"
        );
        let mut h: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        h.push(("x-amz-date".into(), DATE.into()));
        h.push(("authorization".into(), auth));
        h
    }

    fn at_example_time(method: &str, uri: &str, h: &[(String, String)], body: &[u8]) -> Result<Principal, AuthError> {
        verify(&example_users(), "us-east-1", parse_amz_date(DATE).unwrap(), method, uri, h, body)
    }

    #[test]
    fn get_object_with_a_range() {
        let h = request(
            "host;range;x-amz-content-sha256;x-amz-date",
            "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
            &[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("range", "bytes=0-9"),
                ("x-amz-content-sha256", EMPTY_SHA256),
            ],
        );
        let p = at_example_time("GET", "/test.txt", &h, b"").unwrap();
        assert_eq!(p.access_key, ACCESS_KEY);
        // One byte of the signature, or of a signed header, and it fails.
        let mut tampered = h.clone();
        tampered.iter_mut().find(|(k, _)| k == "range").unwrap().1 = "bytes=0-8".into();
        assert_eq!(at_example_time("GET", "/test.txt", &tampered, b""), Err(AuthError::Signature));
    }

    #[test]
    fn put_object_with_a_signed_payload() {
        let h = request(
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
            "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
            &[
                ("host", "examplebucket.s3.amazonaws.com"),
                ("date", "Fri, 24 May 2013 00:00:00 GMT"),
                ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
                ("x-amz-content-sha256", "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"),
            ],
        );
        let body = b"Welcome to Amazon S3.";
        assert!(at_example_time("PUT", "/test%24file.text", &h, body).is_ok());
        assert_eq!(
            at_example_time("PUT", "/test%24file.text", &h, b"Welcome to Amazon S3!"),
            Err(AuthError::PayloadHash)
        );
    }

    #[test]
    fn get_bucket_lifecycle_and_list_objects() {
        let host = [("host", "examplebucket.s3.amazonaws.com"), ("x-amz-content-sha256", EMPTY_SHA256)];
        let signed = "host;x-amz-content-sha256;x-amz-date";
        let lifecycle = request(signed, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543", &host);
        assert!(at_example_time("GET", "/?lifecycle", &lifecycle, b"").is_ok());
        let list = request(signed, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7", &host);
        assert!(at_example_time("GET", "/?max-keys=2&prefix=J", &list, b"").is_ok());
        assert_eq!(at_example_time("GET", "/?max-keys=3&prefix=J", &list, b""), Err(AuthError::Signature));
    }
}

/// The two payload forms S3 allows besides a hash in `x-amz-content-sha256`:
/// `UNSIGNED-PAYLOAD` (the body is not covered) and no header at all (the
/// signer hashed the body itself). Signed here with aws-sigv4's own request
/// signer, as a client other than ours would, not with [`sign`].
mod payload_forms {
    use super::*;

    /// The signature aws-sigv4 gives `headers` (all of them signed, plus
    /// `x-amz-date` from the time) with `body`, and the headers with
    /// `authorization` and `x-amz-date` added.
    fn client_signed(headers: &[(&str, &str)], body: SignableBody<'_>) -> Vec<(String, String)> {
        let identity = Credentials::new("AKUSER", "usersecret", None, None, "test").into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region("us-east-1")
            .name(SERVICE)
            .time(t0())
            .settings(s3_settings())
            .build()
            .unwrap()
            .into();
        let req = SignableRequest::new("PUT", "/bk/key", headers.iter().copied(), body).unwrap();
        let (instructions, _) = sigv4_sign(req, &params).unwrap().into_parts();
        let mut h: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        h.extend(instructions.headers().map(|(k, v)| (k.to_string(), v.to_string())));
        h
    }

    fn verify_put(h: &[(String, String)], body: &[u8]) -> Result<Principal, AuthError> {
        verify(&users(), "us-east-1", t0(), "PUT", "/bk/key", h, body)
    }

    #[test]
    fn unsigned_payload_covers_the_headers_not_the_body() {
        let h = client_signed(
            &[("host", "127.0.0.1:8080"), ("x-amz-content-sha256", "UNSIGNED-PAYLOAD")],
            SignableBody::UnsignedPayload,
        );
        assert!(h.iter().any(|(k, v)| k == "authorization" && v.contains("x-amz-content-sha256")), "{h:?}");
        assert_eq!(verify_put(&h, b"one body").unwrap().access_key, "AKUSER");
        assert_eq!(verify_put(&h, b"another body").unwrap().access_key, "AKUSER");
        // The declaration is signed: a hash in its place is checked, and fails.
        let mut hashed = h.clone();
        hashed.iter_mut().find(|(k, _)| k == "x-amz-content-sha256").unwrap().1 = sha256_hex(b"one body");
        assert_eq!(verify_put(&hashed, b"one body"), Err(AuthError::Signature));
    }

    #[test]
    fn without_a_hash_header_the_body_is_hashed_into_the_signature() {
        let h = client_signed(&[("host", "127.0.0.1:8080")], SignableBody::Bytes(b"the body"));
        assert!(!h.iter().any(|(k, _)| k == "x-amz-content-sha256"), "{h:?}");
        assert_eq!(verify_put(&h, b"the body").unwrap().access_key, "AKUSER");
        assert_eq!(verify_put(&h, b"the bodY"), Err(AuthError::Signature));
    }
}

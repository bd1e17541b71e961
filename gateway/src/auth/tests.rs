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

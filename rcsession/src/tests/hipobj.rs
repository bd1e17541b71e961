//! The hipobj codecs' edges their own unit tests left open (written for
//! the mutants of hipobj/, issue 39).

use crate::hipobj::*;
use crate::transport::Gid;

#[test]
fn the_abi_op_is_0_for_get_1_for_put_and_nothing_else() {
    assert_eq!(Op::from_abi(0), Some(Op::Get));
    assert_eq!(Op::from_abi(1), Some(Op::Put));
    assert_eq!(Op::from_abi(2), None);
    assert_eq!((Op::Get.to_string(), Op::Put.to_string()), ("GET".to_string(), "PUT".to_string()));
}

#[test]
fn an_empty_hex_value_is_refused_and_17_digits_are_out_of_range() {
    let rule = |r: Result<u64, ParamError>| match r {
        Err(ParamError::Invalid { rule, .. }) => rule,
        other => panic!("{other:?}"),
    };
    assert_eq!(parse_qpn(""), Err(ParamError::Invalid { field: "qpn", rule: "must be bare hex digits" }));
    assert_eq!(rule(parse_mr_addr("")), "must be bare hex digits");
    assert_eq!(rule(parse_mr_addr("10000000000000000")), "out of range");
    assert_eq!(parse_mr_addr("0000000000000000001"), Ok(1), "leading zeros do not count");
}

#[test]
fn a_percent_escape_is_checked_wherever_it_falls_in_a_segment() {
    assert!(parse_target("/b/xy%41z").is_ok());
    for bad in ["/b/xy%41%", "/b/xyz%41%4", "/b/%41%"] {
        assert!(matches!(parse_target(bad), Err(ParamError::Invalid { field: "target", .. })), "{bad}");
    }
}

#[test]
fn session_ids_debug_with_their_hex() {
    let id = SessionId::parse("000000000000000000000000000000ab").unwrap();
    assert_eq!(format!("{id:?}"), "SessionId(000000000000000000000000000000ab)");
}

#[test]
fn a_checksum_and_a_token_display_as_their_wire_form() {
    let c = Crc64Nvme::of(b"hello");
    assert_eq!(c.to_string(), c.to_header());
    assert!(c.to_string().starts_with("CRC64NVME "));
    let t = RdmaToken::rc(0x42, Gid::from_ipv4("10.0.0.1".parse().unwrap()), 1);
    assert_eq!(t.to_string(), t.to_hex());
    assert_eq!(t.to_string().len(), TOKEN_HEX_LEN);
}

#[test]
fn a_bad_high_digit_is_named_by_its_position() {
    let mut hex = RdmaToken::rc(0x42, Gid([0; 16]), 1).to_hex();
    hex.replace_range(6..7, "g");
    assert_eq!(RdmaToken::from_hex(&hex), Err(TokenError::NotHex { at: 6 }));
}

#[test]
fn only_a_gid_with_both_ffff_bytes_is_ipv4() {
    let mut g = [0u8; 16];
    g[12..].copy_from_slice(&[10, 0, 0, 7]);
    for (b10, b11, v4) in [(0xff, 0xff, true), (0xff, 0, false), (0, 0xff, false)] {
        (g[10], g[11]) = (b10, b11);
        assert_eq!(RdmaToken::rc(1, Gid(g), 1).ipv4().is_some(), v4, "{b10:x} {b11:x}");
    }
}

#[test]
fn a_suffix_part_has_1_to_16_digits_leading_zeros_included() {
    let hex = RdmaToken::rc(0x42, Gid::from_ipv4("10.0.0.1".parse().unwrap()), 1).to_hex();
    let sixteen = "0000000000000001";
    match ClientToken::parse(&format!("{hex}:{sixteen}:{sixteen}")) {
        Ok(ClientToken::Rc { suffix: Some(s), .. }) => assert_eq!((s.addr, s.size), (1, 1)),
        other => panic!("{other:?}"),
    }
    for suffix in [format!(":0{sixteen}:1"), format!(":1:0{sixteen}")] {
        assert!(matches!(ClientToken::parse(&format!("{hex}{suffix}")), Err(TokenError::Suffix { .. })), "{suffix}");
    }
}

fn prepare(offset: &str) -> Vec<(&'static str, String)> {
    [
        ("x-amz-rdma-protocol", "hipobj-rc-v2"),
        ("x-amz-rdma-op", "get"),
        ("x-amz-rdma-target", "/b/k"),
        ("x-amz-rdma-size", "4096"),
        ("x-amz-rdma-psn", "1"),
        ("x-amz-rdma-cookie", "c0de"),
    ]
    .into_iter()
    .map(|(k, v)| (k, v.to_string()))
    .chain([("x-amz-rdma-offset", offset.to_string())])
    .collect()
}

#[test]
fn prepare_headers_take_an_offset_up_to_the_bound_inclusive() {
    let at = (MAX_OFFSET_PLUS_SIZE - 4096).to_string();
    let h = prepare(&at);
    let parsed = PrepareHeaders::parse(h.iter().map(|(k, v)| (*k, v.as_str()))).unwrap();
    assert_eq!(parsed.offset, MAX_OFFSET_PLUS_SIZE - 4096);
    let past = (MAX_OFFSET_PLUS_SIZE - 4095).to_string();
    let h = prepare(&past);
    assert_eq!(PrepareHeaders::parse(h.iter().map(|(k, v)| (*k, v.as_str()))), Err(HeaderError::Range));
}

#[test]
fn cancel_headers_are_the_protocol_and_session_and_parse_back() {
    let c = CancelHeaders { session: SessionId::parse("0123456789abcdef0123456789abcdef").unwrap() };
    let h = c.to_headers();
    assert_eq!(
        h,
        [
            ("x-amz-rdma-protocol".to_string(), "hipobj-rc-v2".to_string()),
            ("x-amz-rdma-session".to_string(), "0123456789abcdef0123456789abcdef".to_string()),
        ]
    );
    assert_eq!(CancelHeaders::parse(h.iter().map(|(k, v)| (k.as_str(), v.as_str()))), Ok(c));
}

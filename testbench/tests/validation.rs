//! Bad scenario files are refused with a useful message: syntax and type
//! errors with line and column, broken rules with the field and the rule.

use rctb_scenario::scenario::{Invalid, Scenario, ScenarioError};

const NODES: &str = r#"
name = "v"
[fabric]
[[fabric.nodes]]
name = "a"
ip = "10.0.0.1"
[[fabric.nodes]]
name = "b"
ip = "10.0.0.2"
"#;

fn stream(fields: &str) -> String {
    format!("{NODES}\n[[streams]]\nname = \"s\"\nfrom = \"a\"\nto = \"b\"\ncount = 10\n{fields}\n")
}

fn invalid(text: &str) -> Vec<Invalid> {
    match Scenario::from_toml(text, "test.toml") {
        Err(ScenarioError::Invalid { errors, .. }) => errors,
        other => panic!("expected rule violations, got {other:?}"),
    }
}

fn parse_error(text: &str) -> String {
    match Scenario::from_toml(text, "test.toml") {
        Err(e @ ScenarioError::Parse { .. }) => e.to_string(),
        other => panic!("expected a parse error, got {other:?}"),
    }
}

#[test]
fn a_good_stream_parses() {
    let s = Scenario::from_toml(&stream("op = \"send\"\nsize = { min = 1, max = 9 }"), "t").unwrap();
    assert_eq!((s.streams[0].config.min_size, s.streams[0].config.max_size), (1, 9));
}

#[test]
fn syntax_and_type_errors_carry_line_and_column() {
    let e = parse_error(&stream("op = \"send\"\nsize = \"big\""));
    assert!(e.contains("test.toml") && e.contains("line 17, column 8"), "{e}");
    let e = parse_error(&stream("op = \"send\"\nsize = 10\nqueue_dept = 4"));
    assert!(e.contains("unknown field `queue_dept`") && e.contains("line 18"), "{e}");
    let e = parse_error(&stream("op = \"send\"\nsize = 10\nstart = \"3 fortnights\""));
    assert!(e.contains("is not a duration") && e.contains("line 18"), "{e}");
    let e = parse_error(&NODES.replace("10.0.0.2", "10.0.0.999"));
    assert!(e.contains("line 9"), "{e}");
}

#[test]
fn unknown_nodes_are_named_with_the_field() {
    let errors = invalid(&stream("op = \"send\"\nsize = 10").replace("to = \"b\"", "to = \"c\""));
    assert_eq!(
        errors,
        vec![Invalid::UnknownNode { field: "streams.\"s\".to".into(), name: "c".into(), known: "a, b".into() }]
    );
    assert_eq!(errors[0].to_string(), "streams.\"s\".to: unknown node \"c\" (nodes: a, b)");
}

#[test]
fn probabilities_must_be_within_zero_and_one() {
    let text = stream("op = \"send\"\nsize = 1")
        .replace("[fabric]\n", "[fabric]\nfaults = { drop = 1.5, duplicate = -0.1 }\n");
    let fields: Vec<String> = invalid(&text).iter().map(|e| e.to_string()).collect();
    assert_eq!(
        fields,
        vec![
            "fabric.faults.drop = 1.5: must be within 0..=1 (a probability)",
            "fabric.faults.duplicate = -0.1: must be within 0..=1 (a probability)",
        ]
    );
}

#[test]
fn settings_that_do_not_apply_are_refused() {
    let errors = invalid(&stream("op = \"write\"\nsize = 8\ntimeout = 10\nrecv_depth = 2"));
    let fields: Vec<&str> = errors.iter().map(|e| e.field()).collect();
    assert_eq!(fields, vec!["streams.\"s\".recv_depth", "streams.\"s\".timeout"]);
    assert!(errors[1].to_string().contains("connect = \"manual\""), "{}", errors[1]);
    assert!(Scenario::from_toml(&stream("op = \"write\"\nsize = 8\ntimeout = 10\nconnect = \"manual\""), "t").is_ok());
}

#[test]
fn expectations_name_real_statuses_and_counters() {
    let text = stream("op = \"send\"\nsize = 8\n[streams.expect]\nerrors = { RETRY_EXCEEDED = 1, SUCCESS = 2 }")
        + "[expect]\nfabric = { packets = 3 }\n";
    let errors = invalid(&text);
    assert!(matches!(&errors[0], Invalid::UnknownStatus { name, .. } if name == "RETRY_EXCEEDED"), "{errors:?}");
    assert!(errors[1].to_string().contains("SUCCESS is not an error"), "{}", errors[1]);
    assert!(matches!(&errors[2], Invalid::UnknownCounter { name, .. } if name == "packets"), "{errors:?}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = stream("op = \"teleport\"\nsize = 8\nqueue_depth = 0\nretry_cnt = 9")
        .replace("name = \"b\"", "name = \"a\"")
        .replace("to = \"b\"", "to = \"a\"");
    let e = Scenario::from_toml(&text, "test.toml").unwrap_err().to_string();
    for needle in [
        "fabric.nodes[1].name: \"a\" is already used",
        "streams.\"s\".op = \"teleport\": must be one of send, send_imm, write, write_imm, read",
        "streams.\"s\".to: must differ from `from`",
        "streams.\"s\".queue_depth = 0: must be within 1..=4096",
        "streams.\"s\".retry_cnt = 9: must be within 0..=7",
    ] {
        assert!(e.contains(needle), "missing {needle:?} in:\n{e}");
    }
}

#[test]
fn the_scenario_format_example_is_a_valid_scenario() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/scenarios.md"))
        .expect("docs/scenarios.md");
    let format = doc.find("## The scenario format").expect("docs/scenarios.md has the scenario format");
    let start = format + doc[format..].find("```toml\n").expect("a TOML example") + "```toml\n".len();
    let end = start + doc[start..].find("```").expect("closed block");
    let scenario = Scenario::from_toml(&doc[start..end], "docs/scenarios.md").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(scenario.streams[0].config.name, "bulk");
}

#[test]
fn the_documented_target_config_is_a_valid_target_file() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/nvme-of.md")).expect("docs/nvme-of.md");
    let at = doc.find("```toml\nnqn = ").expect("docs/nvme-of.md has the target config example") + "```toml\n".len();
    let end = at + doc[at..].find("```").expect("closed block");
    let f: rctb::cli::nvme_target::TargetFile = toml::from_str(&doc[at..end]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.namespace.len(), 2);
    assert_eq!(f.faults.error_io, Some(1));
    assert_eq!(f.faults.random.and_then(|r| r.delay_rate), Some(0.05));
}

fn swarm(fields: &str) -> String {
    format!("{}\n[swarm]\n{fields}\n", stream("op = \"send\"\nsize = 8"))
}

#[test]
fn swarm_tables_are_checked() {
    let ok = Scenario::from_toml(&swarm("drop = 0.1\nheal_at = \"5ms\""), "t").unwrap();
    let s = ok.swarm.expect("swarm parsed");
    assert_eq!((s.max.drop, s.heal_at), (0.1, rctb_core::time::Duration::from_millis(5)));

    let e = invalid(&swarm("drop = 1.5\nheal_at = \"5ms\""));
    assert!(e.iter().any(|i| i.field() == "swarm.drop"), "{e:?}");
    let e = invalid(&swarm("partitions = 2\nheal_at = \"5ms\""));
    assert!(e.iter().any(|i| i.field() == "swarm.max_partition"), "{e:?}");
    let e = invalid(&swarm("heal_at = \"0s\""));
    assert!(e.iter().any(|i| i.field() == "swarm.heal_at"), "{e:?}");
    // A typo is an error, not a silent default.
    let msg = parse_error(&swarm("dorp = 0.1\nheal_at = \"5ms\""));
    assert!(msg.contains("dorp"), "{msg}");
    let msg = parse_error(&swarm("drop = 0.1"));
    assert!(msg.contains("heal_at"), "{msg}");
}

#[test]
fn roce_streams_check_their_own_fields() {
    let ok =
        Scenario::from_toml(&stream("op = \"roce\"\nsize = 64\nchannels = [0, 255]\nconsumer_delay = \"1us\""), "t")
            .unwrap_or_else(|e| panic!("{e}"));
    let roce = ok.streams[0].roce.as_ref().expect("a roce stream");
    assert_eq!((roce.channels.as_slice(), roce.max_payload), (&[0u8, 255][..], 64));
    let errors = invalid(&stream(
        "op = \"roce\"\nsize = { min = 0, max = 100 }\nchannels = [1, 256]\nqueue_depth = 33\nmax_payload = 99\n\
         connect = \"manual\"\ntimeout = 10",
    ));
    let text: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    let fields: Vec<&str> = errors.iter().map(|e| e.field()).collect();
    assert_eq!(
        fields,
        vec![
            "streams.\"s\".timeout",
            "streams.\"s\".connect",
            "streams.\"s\".size",
            "streams.\"s\".queue_depth",
            "streams.\"s\".channels[1]",
            "streams.\"s\".max_payload",
        ],
        "{text:#?}"
    );
    assert!(text[3].contains("1..=32 (the engine QP's max_send_wr)"), "{}", text[3]);
    assert!(text[5].contains("99 is below the largest frame (100)"), "{}", text[5]);
    let errors = invalid(&stream("op = \"send\"\nsize = 8\nchannels = [1]\nconsumer_delay = \"1us\""));
    let fields: Vec<&str> = errors.iter().map(|e| e.field()).collect();
    assert_eq!(fields, vec!["streams.\"s\".channels", "streams.\"s\".consumer_delay"]);
    assert!(errors[0].to_string().contains("is only for op = \"roce\""), "{}", errors[0]);
    let errors = invalid(&stream("op = \"rdma\"\nsize = 8"));
    assert!(errors[0].to_string().contains("send, send_imm, write, write_imm, read, roce"), "{}", errors[0]);
}

//! The documentation cannot point at what is not there.
//!
//! For every Markdown file in the repository: each relative link (and image)
//! resolves to a file or directory, each `#anchor` names a heading of the
//! file it points into, and each repository path named in backticks
//! (`core/src/lib.rs`, `ci/hw-validate`, `gateway/src/http.rs:222`) exists,
//! with its line number inside the file. Docs move and code moves; this is
//! what tells a reader's dead end apart from a working link.
//!
//! And every `rctb` command in a shell block parses as the binary parses
//! it; a synopsis (`rctb run SCENARIO [--seed N]`) names only flags its
//! subcommand has. The scenario and target-file blocks are parsed by
//! `scenario/tests/nvme_scenarios.rs` and `testbench/tests/validation.rs`.
//! And every section a file cites (`protocols.md §2.7`) is a section of
//! docs/protocols.md.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("testbench/ sits in the repository root").to_path_buf()
}

/// Directories that hold build output or generated files, not docs.
fn is_skipped_dir(dir: &Path) -> bool {
    let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
    // Cargo marks every target directory, whatever its name, with CACHEDIR.TAG.
    name == ".git" || name == "target" || name == "node_modules" || dir.join("CACHEDIR.TAG").exists()
}

fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    repo_files(dir, &["md"], out);
}

/// The file's lines outside fenced code blocks; lines inside are blanked, so
/// line numbers in messages stay right and paragraphs stay apart.
fn prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => {
                fence = Some(m);
                out.push(String::new());
            }
            (Some(open), Some(m)) if open == m => {
                fence = None;
                out.push(String::new());
            }
            (Some(_), _) => out.push(String::new()),
            (None, None) => out.push(line.to_string()),
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// to hyphens; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose_lines(text) {
        let Some(title) = line.strip_prefix('#') else { continue };
        let title = title.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while seen.contains(&candidate) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
        seen.insert(candidate);
    }
    seen
}

/// Link targets in prose, with the line they start on: `[text](target)`,
/// `![alt](target)` and reference definitions `[label]: target`.
fn link_targets(lines: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let end = after.find([')', ' ']).unwrap_or(after.len());
            out.push((i + 1, after[..end].to_string()));
            rest = &after[end..];
        }
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some(close) = trimmed.find("]: ")
        {
            let target = trimmed[close + 3..].split_whitespace().next().unwrap_or("");
            out.push((i + 1, target.to_string()));
        }
    }
    out
}

/// Inline code spans in prose, with the line they start on. A span may wrap
/// onto the next line of its paragraph, never across a blank line.
fn code_spans(lines: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, String)> = None; // (line, backtick run, text so far)
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            open = None;
            continue;
        }
        let chars: Vec<char> = line.chars().collect();
        let mut j = 0;
        if let Some((_, _, text)) = open.as_mut() {
            text.push(' ');
        }
        while j < chars.len() {
            if chars[j] == '`' {
                let run = chars[j..].iter().take_while(|c| **c == '`').count();
                match open.take() {
                    Some((start, n, text)) if n == run => out.push((start, text.trim().to_string())),
                    Some(mut unclosed) => {
                        unclosed.2.extend(std::iter::repeat_n('`', run));
                        open = Some(unclosed);
                    }
                    None => open = Some((i + 1, run, String::new())),
                }
                j += run;
            } else {
                if let Some((_, _, text)) = open.as_mut() {
                    text.push(chars[j]);
                }
                j += 1;
            }
        }
    }
    out
}

/// The words of a code span that name a path in the repository: they start
/// with one of its top-level directories (or are one of its top-level
/// Markdown files), carry no glob or placeholder, and are not output that
/// the tools write (`ci/out/`, `target/`). Each keeps its `:line` suffix.
fn repo_paths_in(span: &str, top_dirs: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for word in span.split_whitespace() {
        let word = word.trim_end_matches([',', ';', '.', ')']).trim_start_matches('(');
        if word.contains(['*', '{', '<', '$', '=', '[', '|']) || word.contains("...") || word.contains("://") {
            continue;
        }
        let (path, _) = split_line_suffix(word);
        let first = path.split('/').next().unwrap_or("");
        let top_level_doc = !path.contains('/') && path.ends_with(".md") && path.chars().all(|c| !c.is_lowercase());
        let in_a_top_dir = path.contains('/') && top_dirs.contains(first);
        let generated = path.starts_with("ci/out/") || path.starts_with("target/");
        if (top_level_doc || in_a_top_dir) && !generated {
            out.push(word.to_string());
        }
    }
    out
}

/// `path:12`, `path:12-30` or `path:80-82,187` -> (`path`, Some(highest line)).
fn split_line_suffix(word: &str) -> (&str, Option<usize>) {
    if let Some((path, lines)) = word.rsplit_once(':')
        && !lines.is_empty()
        && lines.chars().all(|c| c.is_ascii_digit() || c == '-' || c == ',')
    {
        return (path, lines.split([',', '-']).filter_map(|n| n.parse().ok()).max());
    }
    (word, None)
}

fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

#[test]
fn every_link_and_named_path_in_the_docs_resolves() {
    let root = repo_root();
    let mut docs = Vec::new();
    markdown_files(&root, &mut docs);
    assert!(docs.iter().any(|d| d.ends_with("docs/protocols.md")), "found the docs under {}", root.display());
    let top_dirs: BTreeSet<String> = fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !is_skipped_dir(p))
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .collect();

    let mut problems = Vec::new();
    let mut checked = 0;
    for doc in &docs {
        let text = fs::read_to_string(doc).unwrap();
        let lines = prose_lines(&text);
        let dir = doc.parent().unwrap();
        let here = relative(&root, doc);

        for (line, target) in link_targets(&lines) {
            if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((file, anchor)) => (file, Some(anchor)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() { doc.clone() } else { dir.join(file) };
            if !resolved.exists() {
                problems.push(format!("{here}:{line}: link to {target}: no {}", relative(&root, &resolved)));
                continue;
            }
            if let Some(anchor) = anchor
                && resolved.extension().is_some_and(|x| x == "md")
                && !anchors(&fs::read_to_string(&resolved).unwrap()).contains(anchor)
            {
                problems.push(format!("{here}:{line}: link to {target}: no such heading"));
            }
        }

        for (line, span) in code_spans(&lines) {
            for word in repo_paths_in(&span, &top_dirs) {
                checked += 1;
                let (path, last_line) = split_line_suffix(&word);
                let found = [root.join(path), dir.join(path)].into_iter().find(|p| p.exists());
                match (found, last_line) {
                    (None, _) => problems.push(format!("{here}:{line}: `{word}` names no file in the repository")),
                    (Some(file), Some(n)) => {
                        let len = fs::read_to_string(&file).map(|t| t.lines().count()).unwrap_or(0);
                        if n == 0 || n > len {
                            problems.push(format!("{here}:{line}: `{word}`: {path} has {len} lines"));
                        }
                    }
                    (Some(_), None) => {}
                }
            }
        }
    }
    assert!(checked > 200, "only {checked} links and paths found: is the scan broken?");
    assert!(problems.is_empty(), "{} dead references in the docs:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# Two commands\n## 8. What the simulator does not model\n```\n# not a heading\n```\n\
                ## NVMe-oF over udp: the kernel's host\n## Two commands\n";
    let got = anchors(text);
    for want in
        ["two-commands", "8-what-the-simulator-does-not-model", "nvme-of-over-udp-the-kernels-host", "two-commands-1"]
    {
        assert!(got.contains(want), "{want} missing from {got:?}");
    }
    assert!(!got.contains("not-a-heading"), "a comment in a code block is not a heading");
}

#[test]
fn code_spans_and_paths_are_read_as_a_reader_sees_them() {
    let lines: Vec<String> =
        ["see `core/src/lib.rs:12` and `rctb run", "scenarios/quickstart.toml --seed 7`", "", "`x`"]
            .into_iter()
            .map(String::from)
            .collect();
    let spans = code_spans(&lines);
    assert_eq!(spans.len(), 3, "{spans:?}");
    let top: BTreeSet<String> = ["core", "scenarios", "ci"].into_iter().map(String::from).collect();
    assert_eq!(repo_paths_in(&spans[0].1, &top), ["core/src/lib.rs:12"]);
    assert_eq!(repo_paths_in(&spans[1].1, &top), ["scenarios/quickstart.toml"]);
    assert!(repo_paths_in("ci/out/bench.md ci/vm/checks.d/*.sh DIR/channel-<N>.bin", &top).is_empty());
    assert_eq!(split_line_suffix("a/b.rs:10-20"), ("a/b.rs", Some(20)));
    assert_eq!(split_line_suffix("a/b.rs:80-82,187"), ("a/b.rs", Some(187)));
    assert_eq!(split_line_suffix("a/b.rs"), ("a/b.rs", None));
}

/// The fenced code blocks of a Markdown text: (line of the opening fence,
/// its language, its lines).
fn code_blocks(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        match open.as_mut() {
            None if trimmed.starts_with("```") => {
                open = Some((i + 1, trimmed.trim_start_matches('`').trim().to_string(), Vec::new()));
            }
            Some(_) if trimmed.starts_with("```") => blocks.push(open.take().expect("open")),
            Some((_, _, lines)) => lines.push(line.to_string()),
            None => {}
        }
    }
    blocks
}

/// A command line split as a shell splits it: whitespace outside quotes;
/// an unquoted word that starts with `#` ends the command, and so does a
/// redirection, pipe or list operator. An expansion (`$VAR`, `${VAR}`,
/// `$((...))`) stands for `1`: a value the docs cannot know, which parses
/// as a number, a count or part of a path.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let (mut in_word, mut quote) = (false, None);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (q, '$') if q != Some('\'') => {
                match chars.peek() {
                    Some('(') => {
                        let mut depth = 0;
                        for c in chars.by_ref() {
                            depth += match c {
                                '(' => 1,
                                ')' => -1,
                                _ => 0,
                            };
                            if depth == 0 {
                                break;
                            }
                        }
                    }
                    Some('{') => while chars.next().is_some_and(|c| c != '}') {},
                    _ => while chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_').is_some() {},
                }
                word.push('1');
                in_word = true;
            }
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, '#') if !in_word => break,
            (None, '>' | '<' | '|' | ';' | '&') if !in_word => break,
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// The commands of a shell block: continuation lines joined, and in a
/// `console` block only the lines after a `$ ` prompt.
fn commands(lang: &str, lines: &[String]) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        let text = match (&pending, lang) {
            (Some(_), _) => line.trim().to_string(),
            (None, "console") => match line.trim_start().strip_prefix("$ ") {
                Some(cmd) => cmd.to_string(),
                None => continue,
            },
            (None, _) => line.trim().to_string(),
        };
        let (at, mut joined) = pending.take().unwrap_or((i, String::new()));
        match text.strip_suffix('\\') {
            Some(head) => {
                joined.push_str(head.trim_end());
                joined.push(' ');
                pending = Some((at, joined));
            }
            None => {
                joined.push_str(&text);
                out.push((at, joined));
            }
        }
    }
    out
}

/// The arguments of an `rctb` invocation in a command, with `rctb` first:
/// `rctb ...`, `target/release/rctb ...`, or `cargo run ... -p rctb -- ...`.
fn rctb_invocation(words: &[String]) -> Option<Vec<String>> {
    // `RCTB=target/debug/rctb script` hands the binary to a script: not a call.
    if let Some(at) = words.iter().position(|w| w == "rctb" || (w.ends_with("/rctb") && !w.contains('='))) {
        let before = &words[..at];
        // `cargo test -p rctb`, `cargo build -p rctb` name the package, not the binary.
        if !before.iter().any(|w| w == "-p" || w == "--package") {
            return Some(words[at..].to_vec());
        }
    }
    let cargo_run = words.windows(2).any(|w| w[0] == "cargo" && w[1] == "run");
    let package = words.windows(2).any(|w| (w[0] == "-p" || w[0] == "--package") && w[1] == "rctb");
    let dashes = words.iter().position(|w| w == "--")?;
    (cargo_run && package && !words.iter().any(|w| w == "--example"))
        .then(|| std::iter::once("rctb".to_string()).chain(words[dashes + 1..].iter().cloned()).collect())
}

/// A synopsis shows optional parts (`[--seed N]`), alternatives (`a|b`) or
/// repetition (`...`); it is checked flag by flag, not parsed whole.
fn is_synopsis(args: &[String]) -> bool {
    args.iter().any(|w| w.contains('[') || w.contains(']') || w.contains("...") || w.contains('|'))
}

/// Each flag of a synopsis exists on the subcommand it is written after.
fn synopsis_problems(args: &[String]) -> Vec<String> {
    use clap::CommandFactory;
    let mut cmd = rctb::cli::command::Cli::command();
    cmd.build();
    let mut words = args[1..].iter().peekable();
    while let Some(sub) = words.peek().and_then(|w| cmd.find_subcommand(w.as_str())).cloned() {
        cmd = sub;
        words.next();
    }
    let mut problems = Vec::new();
    for word in words {
        let flag = word.trim_start_matches('[').trim_end_matches(']').split('=').next().unwrap_or("");
        let known = if let Some(long) = flag.strip_prefix("--") {
            cmd.get_arguments().any(|a| a.get_long() == Some(long))
        } else if let Some(short) = flag.strip_prefix('-').filter(|s| s.chars().count() == 1) {
            cmd.get_arguments().any(|a| a.get_short().map(String::from).as_deref() == Some(short))
        } else {
            true
        };
        if !known {
            problems.push(format!("`{}` has no {flag}", cmd.get_name()));
        }
    }
    problems
}

#[test]
fn every_rctb_command_in_the_docs_parses() {
    use clap::Parser;
    let root = repo_root();
    let mut docs = Vec::new();
    markdown_files(&root, &mut docs);
    let (mut parsed, mut synopses, mut problems) = (0, 0, Vec::new());
    for doc in &docs {
        let here = relative(&root, doc);
        for (fence_line, lang, lines) in code_blocks(&fs::read_to_string(doc).unwrap()) {
            if !matches!(lang.as_str(), "sh" | "console" | "bash" | "shell") {
                continue;
            }
            for (i, command) in commands(&lang, &lines) {
                let Some(args) = rctb_invocation(&shell_words(&command)) else { continue };
                let at = format!("{here}:{}", fence_line + 1 + i);
                if is_synopsis(&args) {
                    synopses += 1;
                    problems.extend(synopsis_problems(&args).into_iter().map(|p| format!("{at}: {p}")));
                    continue;
                }
                parsed += 1;
                match rctb::cli::command::Cli::try_parse_from(&args) {
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), clap::error::ErrorKind::DisplayVersion) => {}
                    Err(e) => problems.push(format!("{at}: `{command}`:\n{}", e.render())),
                }
            }
        }
    }
    // README's two commands, the nvme, object, udp and scenario pages: a
    // scan that finds few has stopped reading the blocks.
    assert!(parsed >= 25 && synopses >= 3, "only {parsed} commands and {synopses} synopses found: is the scan broken?");
    assert!(problems.is_empty(), "{} rctb commands in the docs do not parse:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn shell_words_and_invocations_read_as_a_shell_would() {
    let words = shell_words(r#"RCTB_IBV_ADDR=127.0.0.2 rctb object get 's3://bk/a key' "F" # comment"#);
    assert_eq!(words, ["RCTB_IBV_ADDR=127.0.0.2", "rctb", "object", "get", "s3://bk/a key", "F"]);
    let words = shell_words("rctb sweep s.toml --shard $((JOB_INDEX + 1))/4 --start ${S} > out-$I.jsonl");
    assert_eq!(words, ["rctb", "sweep", "s.toml", "--shard", "1/4", "--start", "1"]);
    assert_eq!(rctb_invocation(&shell_words("RCTB=target/debug/rctb capi/ibverbs/tests/conformance.sh")), None);
    let args = |line: &str| rctb_invocation(&shell_words(line));
    assert_eq!(args("cargo run --release -p rctb -- run q.toml").unwrap(), ["rctb", "run", "q.toml"]);
    assert_eq!(args("ip netns exec udp rctb decode x.pcap").unwrap(), ["rctb", "decode", "x.pcap"]);
    assert_eq!(args("cargo test -p rctb --test cli"), None);
    assert_eq!(args("cargo build --release -p rctb-ibverbs"), None);
    let block = ["$ rctb nvme identify", "output line", "$ rctb run a \\", "  --seed 3"].map(String::from);
    assert_eq!(commands("console", &block), [(0, "rctb nvme identify".into()), (2, "rctb run a --seed 3".into())]);
    assert!(synopsis_problems(&shell_words("rctb run SCENARIO [--seed N] [--no-such-flag]")).len() == 1);
}

/// Every file of the repository with one of `extensions`, build output skipped.
fn repo_files(dir: &Path, extensions: &[&str], out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if !is_skipped_dir(&path) {
                repo_files(&path, extensions, out);
            }
        } else if path.extension().and_then(|x| x.to_str()).is_some_and(|x| extensions.contains(&x)) {
            out.push(path);
        }
    }
}

/// The section numbers of docs/protocols.md: `## 2. NVMe-oF` is `2`,
/// `### 2.7 Controller bring-up` is `2.7`.
fn protocol_sections(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("### ").or_else(|| l.strip_prefix("## ")))
        .filter_map(|h| h.split_whitespace().next())
        .map(|n| n.trim_end_matches('.').to_string())
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .collect()
}

/// `protocols.md §2.7` (or `docs/protocols.md § 2`) in a text: the section
/// numbers it cites, with their lines.
fn protocol_citations(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("protocols.md") {
            rest = &rest[at + "protocols.md".len()..];
            let Some(after) =
                rest.char_indices().take(4).find(|(_, c)| *c == '§').map(|(j, _)| &rest[j + '§'.len_utf8()..])
            else {
                continue;
            };
            let number: String = after.trim_start().chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            out.push((i + 1, number.trim_end_matches('.').to_string()));
        }
    }
    out
}

#[test]
fn every_protocols_md_section_the_code_cites_exists() {
    let root = repo_root();
    let sections = protocol_sections(&fs::read_to_string(root.join("docs/protocols.md")).unwrap());
    assert!(sections.contains("0.4") && sections.contains("3"), "sections read: {sections:?}");
    let mut files = Vec::new();
    repo_files(&root, &["rs", "md", "py", "sh", "toml", "c"], &mut files);
    let (mut cited, mut problems) = (0, Vec::new());
    for file in files {
        let Ok(text) = fs::read_to_string(&file) else { continue };
        for (line, number) in protocol_citations(&text) {
            cited += 1;
            if !sections.contains(&number) {
                problems.push(format!("{}:{line}: protocols.md \u{a7}{number} is no section", relative(&root, &file)));
            }
        }
    }
    assert!(cited >= 20, "only {cited} citations found: is the scan broken?");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        protocol_citations("see docs/protocols.md §2.7, and protocols.md § 1."),
        [(1, "2.7".into()), (1, "1".into())]
    );
}

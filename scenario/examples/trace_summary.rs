//! Prints the RC connections of a pcap as normalized header sequences
//! (`rctb_scenario::wiretrace`), the format of `testdata/traces/*.txt`:
//!
//! ```sh
//! cargo run -p rctb-scenario --example trace_summary -- FILE.pcap          # one line per connection
//! cargo run -p rctb-scenario --example trace_summary -- FILE.pcap 1 41     # connections 1..=41, every frame
//! ```
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: trace_summary FILE.pcap [FIRST LAST]");
        std::process::exit(2);
    };
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let conns = rctb_scenario::wiretrace::connections(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let range = match (args.get(1), args.get(2)) {
        (Some(a), Some(b)) => Some((a.parse::<usize>().expect("FIRST"), b.parse::<usize>().expect("LAST"))),
        _ => None,
    };
    for (i, c) in conns.iter().enumerate() {
        let lines = c.lines();
        match range {
            None => println!(
                "{i:3} port {} {} frames: {}",
                c.udp_port,
                lines.len(),
                lines.first().map_or("", String::as_str)
            ),
            Some((first, last)) if (first..=last).contains(&i) => {
                println!("# connection {}", i - first);
                for l in lines {
                    println!("{l}");
                }
            }
            Some(_) => {}
        }
    }
}

#!/usr/bin/env bash
# Fuzz smoke: every target for FUZZ_SECONDS (default 30) on stable Rust
# (-s none: no sanitizer). New inputs go to a scratch directory so the
# committed corpus stays minimal; a crash leaves fuzz/artifacts/<target>/
# and fails the script. `cargo test` replays the committed corpora anyway.
set -euo pipefail
cd "$(dirname "$0")"
secs=${FUZZ_SECONDS:-30}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
cargo fuzz build -s none
# rcserver_abi's server needs a verbs device: rctb's libibverbs.so.1.
(cd .. && cargo build --release -p rctb-ibverbs)
verbs=${CARGO_TARGET_DIR:-$(cd .. && pwd)/target}/release/rctb-verbs
for target in $(cargo fuzz list); do
    device=()
    if [ "$target" = rcserver_abi ]; then
        device=(env LD_LIBRARY_PATH="$verbs" RCTB_IBV_ADDR=127.0.0.36)
    fi
    work=$(mktemp -d)
    echo "== fuzz $target for ${secs}s"
    if ! "${device[@]}" cargo fuzz run -s none "$target" "$work" "corpus/$target" -- \
        -max_total_time="$secs" -print_final_stats=1 >"$work.log" 2>&1; then
        tail -n 40 "$work.log"
        echo "FAIL fuzz $target (reproduce: cargo fuzz run -s none $target fuzz/artifacts/$target/<crash file>)"
        exit 1
    fi
    grep -E '^stat::number_of_executed_units|^stat::average_exec_per_sec' "$work.log" | tr '\n' ' '
    echo
    echo "PASS fuzz $target"
    rm -rf "$work" "$work.log"
done

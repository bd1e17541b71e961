#!/usr/bin/env bash
# Regenerates src/sys.rs from the system's verbs.h (libibverbs-dev) with
# bindgen-cli (`cargo install bindgen-cli`). Structures, constants and
# enums only: the functions are this crate's own, and doc comments are
# left out (the header's text stays the header's).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
echo '#include <infiniband/verbs.h>' > "$tmp/wrapper.h"
bindgen "$tmp/wrapper.h" \
  --allowlist-type 'ibv_.*|verbs_.*|_ibv_.*|_compat_ibv_port_attr|ib_uverbs_.*' \
  --allowlist-var 'IBV_.*|VERBS_.*' \
  --no-prepend-enum-name --default-enum-style consts --with-derive-default \
  --no-doc-comments --blocklist-function '.*' --rust-target 1.85 \
  -o "$tmp/sys.rs"
head -7 src/sys.rs > "$tmp/head.rs"
cat "$tmp/head.rs" "$tmp/sys.rs" > src/sys.rs
# Every unsafe block of the crate says why it is sound, the generated ones too.
python3 "$(dirname "$0")/tests/c/add_safety_lines.py" src/sys.rs
rm -rf "$tmp"

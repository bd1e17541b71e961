#!/usr/bin/env bash
# Regenerates src/sys.rs from the system's rdma/rdma_cma.h (librdmacm-dev)
# with bindgen-cli (`cargo install bindgen-cli`). Structures, constants and
# enums only: the functions are this crate's own, and doc comments are
# left out (the header's text stays the header's).
#
# The verbs types the CM structs reach are generated here too (this crate
# cannot use capi/ibverbs's: that one is a cdylib, not a library Rust can
# depend on). Those held by value (`ibv_ah_attr` in `rdma_ud_param`) and
# those the CM calls fill in (`ibv_qp_init_attr`, `ibv_qp_attr`, ...) are
# generated in full; those only pointed at (`ibv_context`, `ibv_qp`, ...)
# are opaque blobs: the CM reaches them through libibverbs's own calls.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
echo '#include <rdma/rdma_cma.h>' > "$tmp/wrapper.h"
opaque='ibv_context|ibv_device|ibv_pd|ibv_cq|ibv_cq_ex|ibv_qp|ibv_srq|ibv_comp_channel|ibv_sa_path_rec'
opaque+='|ibv_xrcd|ibv_rwq_ind_table|ibv_td|ibv_wq|ibv_mr|ibv_ah|ibv_mw|ibv_dm|ibv_flow|ibv_counters'
bindgen "$tmp/wrapper.h" \
  --allowlist-type 'rdma_.*|ibv_ah_attr|ibv_qp_init_attr|ibv_qp_init_attr_ex|ibv_qp_attr|ibv_srq_init_attr|ibv_srq_init_attr_ex' \
  --allowlist-var 'RDMA_.*|RAI_.*' \
  --opaque-type "$opaque" \
  --no-prepend-enum-name --default-enum-style consts --with-derive-default \
  --no-doc-comments --blocklist-function '.*' --rust-target 1.85 \
  -o "$tmp/sys.rs"
head -7 src/sys.rs > "$tmp/head.rs"
cat "$tmp/head.rs" "$tmp/sys.rs" > src/sys.rs
# Every unsafe block of the crate says why it is sound, the generated ones too.
python3 ../ibverbs/tests/c/add_safety_lines.py src/sys.rs
rm -rf "$tmp"

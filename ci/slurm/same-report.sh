#!/usr/bin/env bash
# ci/slurm/same-report.sh WHOLE MERGED: exits 0 when MERGED (the output of
# `rctb sweep merge ... --json`) is byte for byte WHOLE (`rctb sweep ...
# --json`, one unsharded run of the same seeds). Otherwise it names the
# seeds missing from MERGED (a shard that did not run or was lost), the
# seeds it has that WHOLE lacks, and the seeds whose records differ, and
# exits 1. An empty WHOLE is refused: it would make any empty merge equal.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 WHOLE.jsonl MERGED.jsonl" >&2; exit 2; }
whole=$1 merged=$2
for f in "$whole" "$merged"; do
    [ -f "$f" ] || { echo "$0: no file $f" >&2; exit 1; }
done
[ -s "$whole" ] || { echo "$0: $whole is empty: the unsharded run reported no seed" >&2; exit 1; }
cmp -s "$whole" "$merged" && exit 0

awk -v whole="$whole" -v merged="$merged" '
function seed_of(line) {
    if (!match(line, /"seed":[0-9]+/)) return ""
    return substr(line, RSTART + 7, RLENGTH - 7)
}
function list(a, n,    s, i) {
    s = ""
    for (i = 1; i <= n && i <= 10; i++) s = s (i > 1 ? ", " : "") a[i]
    return s (n > 10 ? ", ... (" n " in all)" : "")
}
FNR == NR {
    s = seed_of($0)
    if (s == "") { printf "%s:%d: not a sweep record: %s\n", whole, FNR, $0; bad = 1; next }
    want[s] = $0
    order[++nwant] = s
    next
}
{
    s = seed_of($0)
    if (s == "") { printf "%s:%d: not a sweep record: %s\n", merged, FNR, $0; bad = 1; next }
    if (s in seen) { printf "%s: seed %s twice\n", merged, s; bad = 1 }
    seen[s] = 1
    if (!(s in want)) extra[++nextra] = s
    else if (want[s] != $0) {
        diff[++ndiff] = s
        if (ndiff <= 3) printf "seed %s differs:\n  unsharded: %s\n  merged:    %s\n", s, want[s], $0
    }
}
END {
    for (i = 1; i <= nwant; i++) if (!(order[i] in seen)) missing[++nmissing] = order[i]
    if (nmissing) printf "%d seeds of the unsharded run are missing from %s (a shard lost?): %s\n", nmissing, merged, list(missing, nmissing)
    if (nextra) printf "%d seeds in %s are not in the unsharded run: %s\n", nextra, merged, list(extra, nextra)
    if (ndiff) printf "%d seeds differ between the unsharded run and %s: %s\n", ndiff, merged, list(diff, ndiff)
    if (!bad && !nmissing && !nextra && !ndiff) printf "%s has the records of %s, in another order\n", merged, whole
}' "$whole" "$merged" >&2
echo "$0: $merged is not the report of one unsharded run ($whole)" >&2
exit 1

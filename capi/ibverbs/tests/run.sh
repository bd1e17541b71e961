#!/usr/bin/env bash
# The C tests of rctb's libibverbs.so.1, against the system's real
# <infiniband/verbs.h> (libibverbs-dev):
#   1. symbol versions: every name in symbols.txt is exported with exactly
#      that version, as the default version (objdump -T);
#   2. offsets: tests/c/offsets.c, regenerated from src/sys.rs and diffed
#      with the committed copy, compiled and run;
#   3. dlvsym: tests/c/dlvsym.c;
#   4. verbs: tests/c/verbs_test.c, two devices in one process, then again
#      with seeded packet loss (RCTB_TEST_FAULTS, default seed=7,drop=0.01;
#      empty: no second run).
# Builds the library first if needed (cargo build --release -p rctb-ibverbs,
# honouring CARGO_TARGET_DIR). Exits non-zero on any failure, naming it.
# Without cc, python3, objdump or the headers it prints "skip: ..." and
# exits 0, or 1 when RCTB_REQUIRE_TOOLS=1.
#
# RCTB_TEST_ADDRS=a,b chooses the two loopback addresses of verbs_test
# (default: the first two of 127.0.0.1, 127.0.0.2, ... whose UDP port 4791
# is free, since other programs on the machine may hold some).
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
crate=$(cd "$here/.." && pwd)
root=$(cd "$crate/../.." && pwd)
cdir=$here/c

skip() {
	echo "skip: $*"
	if [ "${RCTB_REQUIRE_TOOLS:-0}" = 1 ]; then
		echo "RCTB_REQUIRE_TOOLS=1: failing instead of skipping" >&2
		exit 1
	fi
	exit 0
}

for tool in cc python3 objdump cargo; do
	command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done
printf '#include <infiniband/verbs.h>\nint main(void) { return 0; }\n' |
	cc -x c -o /dev/null - -libverbs >/dev/null 2>&1 ||
	skip "cannot compile and link against <infiniband/verbs.h> (install libibverbs-dev)"

target=${CARGO_TARGET_DIR:-$root/target}
libdir=$target/release/rctb-verbs
lib=$target/release/libibverbs.so
echo "# building the library (cargo build --release -p rctb-ibverbs)"
if ! (cd "$root" && cargo build --release -p rctb-ibverbs); then
	echo "FAIL: cargo build --release -p rctb-ibverbs"
	exit 1
fi
if [ ! -e "$libdir/libibverbs.so.1" ]; then
	echo "FAIL: $libdir/libibverbs.so.1 missing after the build"
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()

# ---- 1. symbol versions ----
echo "# symbol versions (objdump -T $lib)"
objdump -T "$lib" >"$work/dynsym" || failed+=("objdump -T")
nsym=0
nbad=0
while read -r name version; do
	case "$name" in '' | '#'*) continue ;; esac
	nsym=$((nsym + 1))
	# A default version prints bare, a hidden (compat) one in parentheses;
	# the defaults of a defined name must be exactly the one version.
	lines=$(awk -v n="$name" '$NF == n && !/\*UND\*/ && $(NF-1) !~ /^\(/ { print $(NF-1) }' "$work/dynsym")
	if [ "$lines" = "$version" ]; then
		echo "ok - $name@@$version"
	else
		echo "not ok - $name: want default version $version, objdump -T shows: ${lines:-nothing}" | tr '\n' ' '
		echo
		nbad=$((nbad + 1))
	fi
done <"$here/symbols.txt"
echo "# symbols: $nsym checks, $nbad failed"
[ "$nbad" = 0 ] || failed+=("symbol versions ($nbad)")

# ---- 2. offsets ----
echo "# offsets (gen_offsets.py from src/sys.rs)"
if ! python3 "$cdir/gen_offsets.py" "$crate/src/sys.rs" >"$work/offsets.c"; then
	failed+=("gen_offsets.py")
elif ! diff -u "$cdir/offsets.c" "$work/offsets.c"; then
	echo "not ok - tests/c/offsets.c is stale: regenerate it with tests/c/gen_offsets.py > tests/c/offsets.c"
	failed+=("offsets.c stale")
fi
if cc -Wall -Werror -o "$work/offsets" "$work/offsets.c"; then
	"$work/offsets" || failed+=("offsets")
else
	failed+=("offsets.c does not compile")
fi

# ---- compile the programs ----
cc -Wall -Werror -O1 -o "$work/dlvsym" "$cdir/dlvsym.c" -ldl || failed+=("dlvsym.c does not compile")
cc -Wall -Werror -O1 -o "$work/verbs_test" "$cdir/verbs_test.c" -libverbs || failed+=("verbs_test.c does not compile")

# Two loopback addresses whose port 4791 nobody holds.
addrs=${RCTB_TEST_ADDRS:-$(python3 - <<'EOF'
import socket
free = []
for last in range(1, 255):
    a = f"127.0.0.{last}"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.bind((a, 4791))
        free.append(a)
    except OSError:
        pass
    finally:
        s.close()
    if len(free) == 2:
        break
print(",".join(free))
EOF
)}
echo "# devices on $addrs"

# ---- 3. dlvsym ----
if [ -x "$work/dlvsym" ]; then
	echo "# dlvsym"
	RCTB_IBV_ADDR=${addrs%%,*} LD_LIBRARY_PATH=$libdir timeout 60 "$work/dlvsym" || failed+=("dlvsym")
fi

# ---- 4. verbs ----
if [ -x "$work/verbs_test" ]; then
	echo "# verbs_test"
	RCTB_IBV_ADDR=$addrs RCTB_IBV_STATS=1 LD_LIBRARY_PATH=$libdir timeout 300 "$work/verbs_test" ||
		failed+=("verbs_test")
	# Again with seeded packet loss: every check must hold through retransmission.
	faults=${RCTB_TEST_FAULTS-seed=7,drop=0.01}
	if [ -n "$faults" ]; then
		echo "# verbs_test with RCTB_IBV_FAULTS=$faults"
		RCTB_IBV_ADDR=$addrs RCTB_IBV_STATS=1 RCTB_IBV_FAULTS=$faults LD_LIBRARY_PATH=$libdir \
			timeout 300 "$work/verbs_test" || failed+=("verbs_test with faults ($faults)")
	fi
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "PASSED: symbol versions, offsets, dlvsym, verbs_test (and with faults)"

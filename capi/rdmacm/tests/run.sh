#!/usr/bin/env bash
# The C tests of rctb's librdmacm.so.1, against the system's real
# <rdma/rdma_cma.h> (librdmacm-dev):
#   1. symbol versions: every name in symbols.txt is exported with exactly
#      that version, as the default version (objdump -T);
#   2. offsets: tests/c/offsets.c, regenerated from src/sys.rs and diffed
#      with the committed copy, compiled and run;
#   3. dlvsym: tests/c/dlvsym.c finds every name of symbols.txt at its node;
#   4. cm_test: tests/c/cm_test.c, linked with -lrdmacm and run on this
#      library: event channels, ids and their argument checks, address
#      info, devices, and what is refused failing with its errno.
# Real programs connecting through it are tests/programs.sh's.
# Builds the library first if needed (cargo build --release -p rctb-rdmacm,
# honouring CARGO_TARGET_DIR). Exits non-zero on any failure, naming it.
# Without cc, python3, objdump or the headers it prints "skip: ..." and
# exits 0, or 1 when RCTB_REQUIRE_TOOLS=1.
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
printf '#include <rdma/rdma_cma.h>\nint main(void) { return 0; }\n' |
	cc -x c -o /dev/null - -lrdmacm >/dev/null 2>&1 ||
	skip "cannot compile and link against <rdma/rdma_cma.h> (install librdmacm-dev)"

target=${CARGO_TARGET_DIR:-$root/target}
libdir=$target/release/rctb-verbs
lib=$target/release/librdmacm.so
echo "# building the libraries (cargo build --release -p rctb-rdmacm -p rctb-ibverbs)"
if ! (cd "$root" && cargo build --release -p rctb-rdmacm -p rctb-ibverbs); then
	echo "FAIL: cargo build --release -p rctb-rdmacm -p rctb-ibverbs"
	exit 1
fi
if [ ! -e "$libdir/librdmacm.so.1" ]; then
	echo "FAIL: $libdir/librdmacm.so.1 missing after the build"
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
# And nothing else under an RDMACM node: the list is the whole public ABI.
extra=$(awk 'NF >= 2 && $(NF-1) ~ /^RDMACM_/ { print $NF }' "$work/dynsym" | sort |
	comm -23 - <(grep -v '^#' "$here/symbols.txt" | awk 'NF { print $1 }' | sort))
if [ -n "$extra" ]; then
	echo "not ok - exported under an RDMACM node but not in symbols.txt: $(echo "$extra" | tr '\n' ' ')"
	nbad=$((nbad + 1))
fi
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

# ---- 3. dlvsym ----
if cc -Wall -Werror -O1 -o "$work/dlvsym" "$cdir/dlvsym.c" -ldl; then
	echo "# dlvsym"
	LD_LIBRARY_PATH=$libdir timeout 60 "$work/dlvsym" "$here/symbols.txt" || failed+=("dlvsym")
else
	failed+=("dlvsym.c does not compile")
fi

# ---- 4. cm_test ----
if cc -Wall -Werror -O1 -o "$work/cm_test" "$cdir/cm_test.c" -lrdmacm; then
	echo "# cm_test"
	LD_LIBRARY_PATH=$libdir timeout 60 "$work/cm_test" || failed+=("cm_test")
else
	failed+=("cm_test.c does not compile")
fi

if [ ${#failed[@]} -gt 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "PASSED: symbol versions, offsets, dlvsym, cm_test"

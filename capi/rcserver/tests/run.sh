#!/usr/bin/env bash
# The C tests of rctb's librcserver.a, against its own header
# (include/rc_server_abi.h), linked as versitygw's cgo line links it:
#   1. symbols: the archive defines every rc_* function of the header, and
#      no libibverbs name (it finds libibverbs with dlopen at init);
#   2. header: include/rc_server_abi.h compiles alone as C11 and as C++
#      with -Wall -Wextra -Werror -pedantic;
#   3. abi_test: tests/c/abi_test.c, linked with
#      -l:librcserver.a -lstdc++ -ldl -lpthread and nothing else, run on a
#      device of rctb's libibverbs.so.1 (RCTB_RCSERVER_ADDR, default
#      127.0.0.31): struct layouts and constants, every rule of the ABI,
#      and 8 threads at once;
#   4. transfer_test: tests/c/transfer_test.c, linked the same way: a whole
#      GET and PUT of 1 B .. 4 MiB over RC with rctb's own hipobj client
#      (examples/rc_client.rs, RcClient on a rctb-udp endpoint) on the other
#      side, clean and with the server's packets lost, duplicated and
#      reordered (RCTB_IBV_FAULTS; the drops are shown to have happened);
#   5. go: tests/go/main.go, a cgo program with versitygw's #cgo LDFLAGS
#      line, built with `go build` and run (Go's own external link).
# Builds the libraries first (cargo build --release, honouring
# CARGO_TARGET_DIR). Exits non-zero on any failure, naming it. Without cc,
# c++, nm or go it prints "skip: ..." and exits 0, or 1 when
# RCTB_REQUIRE_TOOLS=1.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
crate=$(cd "$here/.." && pwd)
root=$(cd "$crate/../.." && pwd)

skip() {
	echo "skip: $*"
	if [ "${RCTB_REQUIRE_TOOLS:-0}" = 1 ]; then
		echo "RCTB_REQUIRE_TOOLS=1: failing instead of skipping" >&2
		exit 1
	fi
	exit 0
}

for tool in cc c++ nm cargo go; do
	command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done

target=${CARGO_TARGET_DIR:-$root/target}
archive=$target/release/librcserver.a
verbs=$target/release/rctb-verbs
echo "# building (cargo build --release -p rctb-rcserver -p rctb-ibverbs --example rc_client)"
if ! (cd "$root" && cargo build --release -p rctb-rcserver -p rctb-ibverbs --example rc_client); then
	echo "FAIL: cargo build --release -p rctb-rcserver -p rctb-ibverbs --example rc_client"
	exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()

# ---- 1. symbols ----
echo "# symbols (nm $archive)"
nm --defined-only -g "$archive" 2>/dev/null | awk '$2 == "T" { print $3 }' | sort -u >"$work/defined"
sed -n 's/^[a-z][a-z_ ]* \**\(rc_[a-z_]*\)(.*/\1/p' "$crate/include/rc_server_abi.h" | sort -u >"$work/declared"
n=$(wc -l <"$work/declared")
[ "$n" -eq 20 ] || failed+=("the header declares $n functions, not 20")
missing=$(comm -23 "$work/declared" "$work/defined")
[ -z "$missing" ] || failed+=("not defined in the archive: $missing")
foreign=$(nm -g "$archive" 2>/dev/null | awk '$1 == "U" && $2 ~ /^(ibv|rdma)_/ { print $2 }' | sort -u)
[ -z "$foreign" ] || failed+=("the archive needs libibverbs names at link time: $foreign")
echo "$n functions declared, all defined; no libibverbs name needed at link time"

# ---- 2. header ----
echo "# header alone, C11 and C++17"
printf '#include "rc_server_abi.h"\nint main(void) { return RC_OK; }\n' >"$work/h.c"
cc -std=c11 -Wall -Wextra -Werror -pedantic -I "$crate/include" -c -o "$work/h.o" "$work/h.c" ||
	failed+=("the header as C11")
cp "$work/h.c" "$work/h.cc"
c++ -std=c++17 -Wall -Wextra -Werror -pedantic -I "$crate/include" -c -o "$work/hh.o" "$work/h.cc" ||
	failed+=("the header as C++17")

# ---- 3. abi_test ----
echo "# abi_test, linked as versitygw links: -l:librcserver.a -lstdc++ -ldl -lpthread"
if cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -I "$crate/include" -o "$work/abi_test" \
	"$here/c/abi_test.c" -L "$(dirname "$archive")" -l:librcserver.a -lstdc++ -ldl -lpthread; then
	addr=${RCTB_RCSERVER_ADDR:-127.0.0.31}
	# A hook that deadlocked on a lock the server held would hang: bound it.
	if ! LD_LIBRARY_PATH="$verbs" RCTB_IBV_ADDR="$addr" timeout 300 "$work/abi_test"; then
		failed+=("abi_test")
	fi
else
	failed+=("compiling and linking abi_test")
fi

# ---- 4. transfer_test ----
echo "# transfer_test: GET and PUT over RC, rctb's client on the other side"
if cc -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O1 -I "$crate/include" -o "$work/transfer_test" \
	"$here/c/transfer_test.c" -L "$(dirname "$archive")" -l:librcserver.a -lstdc++ -ldl -lpthread; then
	server=${RCTB_RCSERVER_ADDR2:-127.0.0.32} client=${RCTB_RCSERVER_CLIENT:-127.0.0.33}
	LD_LIBRARY_PATH="$verbs" RCTB_IBV_ADDR="$server" \
		timeout 300 "$work/transfer_test" "$target/release/examples/rc_client" "$client" "$server" ||
		failed+=("transfer_test")
	faults=seed=5,drop=0.02,dup=0.01,reorder=0.02
	echo "# transfer_test with the server's packets under RCTB_IBV_FAULTS=$faults"
	if LD_LIBRARY_PATH="$verbs" RCTB_IBV_ADDR="$server" RCTB_IBV_FAULTS=$faults RCTB_IBV_STATS=1 \
		timeout 300 "$work/transfer_test" "$target/release/examples/rc_client" "$client" "$server" 2>"$work/faults.err"; then
		cat "$work/faults.err"
		dropped=$(sed -n 's/.*dropped \([0-9]*\).*/\1/p' "$work/faults.err" | head -n 1)
		[ "${dropped:-0}" -gt 0 ] || failed+=("transfer_test under faults: no packet was dropped")
	else
		cat "$work/faults.err"
		failed+=("transfer_test under faults")
	fi
else
	failed+=("compiling and linking transfer_test")
fi

# ---- 5. go ----
echo "# a cgo program with versitygw's link line (go build)"
# Laid out as the binding finds them: the archive in lib/, the header in include/.
mkdir -p "$work/go/lib" "$work/go/include"
cp "$here/go/main.go" "$here/go/go.mod" "$work/go/"
cp "$archive" "$work/go/lib/"
cp "$crate/include/rc_server_abi.h" "$work/go/include/"
if (cd "$work/go" && CGO_ENABLED=1 GOFLAGS=-mod=mod GOCACHE="$work/gocache" go build -o "$work/rcgo" .); then
	LD_LIBRARY_PATH="$verbs" RCTB_IBV_ADDR="${RCTB_RCSERVER_ADDR3:-127.0.0.34}" timeout 120 "$work/rcgo" ||
		failed+=("the cgo program")
else
	failed+=("go build of the cgo program")
fi

if [ ${#failed[@]} -gt 0 ]; then
	printf 'FAIL: %s\n' "${failed[@]}"
	exit 1
fi
echo "PASSED: symbols, header, abi_test, transfer_test (clean and under faults), cgo"

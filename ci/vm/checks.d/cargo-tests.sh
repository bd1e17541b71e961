#!/bin/sh
# cargo-tests: the libtest binaries ci/hw-validate built for real devices
# ($HWV_TESTS, "PACKAGE:TEST ...", default rctb-hw's hw_traffic and conformance), run here
# with RCTB_RDMA_DEVICE=$DEV RCTB_RDMA_PEER_DEVICE=$PEER and
# --include-ignored: one `PASS|FAIL <test>::<case>` line per test case.
# (hw_traffic's cases are #[ignore]d unless built with those variables set,
# and skip unless they are set when run.)
set -u
fails=0
if [ -z "${HWV_TESTS:-}" ]; then
    echo "PASS none-configured"
    exit 0
fi
for t in $HWV_TESTS; do
    name=${t#*:}
    bin=$HWV_TEST_DIR/$name
    log=$HWV_OUT/cargo-test-$name.log
    if [ ! -x "$bin" ]; then
        echo "FAIL $name not built (see the build check)"
        fails=1
        continue
    fi
    RCTB_RDMA_DEVICE=$DEV RCTB_RDMA_PEER_DEVICE=$PEER RUST_BACKTRACE=0 \
        "$TIMEOUT" 80 "$bin" --include-ignored --test-threads=1 >"$log" 2>&1
    rc=$?
    n=0
    # `test <case> ... ok|FAILED`; a failure's reason is the line after its
    # "panicked at" in the `---- <case> stdout ----` section
    for c in $(awk '/^test .* \.\.\. ok$/ { print $2 }' "$log"); do
        echo "PASS $name::$c"
        n=$((n + 1))
    done
    for c in $(awk '/^test .* \.\.\. FAILED$/ { print $2 }' "$log"); do
        why=$(awk -v c="$c" '
            $0 == "---- " c " stdout ----" { s = 1; next }
            s && /^---- / { exit }
            s && p { print; exit }
            s && /panicked at/ { p = 1 }' "$log" | cut -c1-200)
        echo "FAIL $name::$c ${why:-see ci/out/cargo-test-$name.log}"
        n=$((n + 1))
        fails=1
    done
    if [ "$rc" = 124 ]; then
        echo "FAIL $name timed out after 80s (ci/out/cargo-test-$name.log)"
        fails=1
    elif [ "$rc" != 0 ] && [ $fails = 0 ]; then
        echo "FAIL $name exit $rc: $(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-200)"
        fails=1
    elif [ $n = 0 ]; then
        echo "FAIL $name ran no test case"
        fails=1
    fi
done
exit $fails

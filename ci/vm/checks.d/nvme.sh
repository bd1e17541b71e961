#!/bin/sh
# nvme: rctb's NVMe-oF/RDMA initiator (rctb nvme, verbs backend on $DEV)
# against the kernel nvmet-rdma target on $PEER ($NVMET_ADDR:$NVMET_PORT):
# discover, connect, identify; read namespace 1 and compare it with its
# backing file (data the kernel holds); write 4 MiB of random data at
# several offsets (and one in-capsule block), flush, read back and compare,
# and check the backing file holds it too; a wrong NQN and a wrong port
# must fail with errors that say so.
# Then the other way round: `rctb nvme target --backend verbs` on $DEV
# (port 4421), its namespace a file, and the kernel's NVMe/RDMA host on
# $PEER's address connecting to it: the block device reads the file's
# bytes, a 1 MiB O_DIRECT write with fsync reaches the file, and is still
# there once the target is killed (checks verbs-target/*).
# hwv-timeout: 200
set -u
if [ -z "${NVMET_NQN:-}" ] || [ -z "${RCTB:-}" ]; then
    # Not in the VM (or no rctb): nothing to test against.
    echo "PASS skipped-no-nvmet-target"
    exit 0
fi
# shellcheck source=../lib.sh
. "${HWV_LIB:-/hwv/lib.sh}"
W=${HWV_OUT:-/tmp}/nvme-work
mkdir -p "$W"
fails=0
nv() {
    "$TIMEOUT" 60 "$RCTB" nvme "$@" --backend verbs --device "$DEV" -a "$NVMET_ADDR" -s "$NVMET_PORT" -n "$NVMET_NQN"
}
pass() { echo "PASS $1"; }
fail() {
    echo "FAIL $1 $2"
    fails=1
}

# discover: the subsystem is listed at our address.
if nv discover >"$W/discover.out" 2>"$W/discover.err" && grep -q "subnqn:  $NVMET_NQN" "$W/discover.out"; then
    pass discover
else
    fail discover "$(tail -1 "$W/discover.err") $(grep -c subnqn "$W/discover.out") entries"
fi
cat "$W/discover.out"

if nv connect >"$W/connect.out" 2>"$W/connect.err" && grep -q "connected: $NVMET_NQN" "$W/connect.out"; then
    pass connect
else
    fail connect "$(tail -1 "$W/connect.err")"
fi
cat "$W/connect.out"

if nv identify >"$W/identify.out" 2>"$W/identify.err" && grep -q "subnqn  : $NVMET_NQN" "$W/identify.out" &&
    grep -q "NVME Identify Namespace 1:" "$W/identify.out"; then
    pass identify
else
    fail identify "$(tail -1 "$W/identify.err")"
fi
cat "$W/identify.out"
# Namespace 1's block size, from the format in use.
lbads=$(awk '/^NVME Identify Namespace 1:/ { ns = 1 } ns && /\(in use\)/ { sub(/.*lbads:/, ""); print $1; exit }' "$W/identify.out")
bs=$((1 << ${lbads:-12}))
echo "namespace 1 block size: $bs"

# Data the kernel holds: the first 1 MiB of namespace 1 is its backing file's.
mib=$((1048576 / bs))
dd if="$NVMET_NS1_FILE" of="$W/ns1-head.ref" bs="$bs" count="$mib" 2>/dev/null
if nv read --nsid 1 --slba 0 --length 1048576 -o "$W/ns1-head.got" >"$W/read-kernel.out" 2>"$W/read-kernel.err" &&
    cmp -s "$W/ns1-head.ref" "$W/ns1-head.got"; then
    pass read-kernel-data
else
    fail read-kernel-data "$(tail -1 "$W/read-kernel.err") $(cmp "$W/ns1-head.ref" "$W/ns1-head.got" 2>&1 | head -1)"
fi

# 4 MiB of random data at several offsets (in blocks), plus one block sent
# in-capsule; flush; read back; the backing file must hold it too.
dd if=/dev/urandom of="$W/rand.bin" bs=1048576 count=4 2>/dev/null
ok=1
why=""
for off in $((4 * mib)) $((12 * mib + 1)) $((27 * mib + 3)); do
    if ! nv write --nsid 1 --slba "$off" -d "$W/rand.bin" --flush >>"$W/write.out" 2>"$W/write.err"; then
        ok=0
        why="write at block $off: $(tail -1 "$W/write.err")"
        break
    fi
    if ! nv read --nsid 1 --slba "$off" --length 4194304 -o "$W/back.bin" >>"$W/read.out" 2>"$W/read.err"; then
        ok=0
        why="read at block $off: $(tail -1 "$W/read.err")"
        break
    fi
    if ! cmp -s "$W/rand.bin" "$W/back.bin"; then
        ok=0
        why="read-back at block $off differs: $(cmp "$W/rand.bin" "$W/back.bin" 2>&1 | head -1)"
        break
    fi
    dd if="$NVMET_NS1_FILE" of="$W/file.bin" bs="$bs" skip="$off" count=$((4 * mib)) 2>/dev/null
    if ! cmp -s "$W/rand.bin" "$W/file.bin"; then
        ok=0
        why="the backing file at block $off does not hold what we wrote"
        break
    fi
done
cat "$W/write.out" "$W/read.out"
if [ "$ok" = 1 ]; then pass write-flush-read-4MiB; else fail write-flush-read-4MiB "$why"; fi

# One block: small enough to travel as in-capsule data.
dd if=/dev/urandom of="$W/small.bin" bs="$bs" count=1 2>/dev/null
if nv write --nsid 1 --slba 100 -d "$W/small.bin" --flush >"$W/small.out" 2>"$W/small.err" &&
    nv read --nsid 1 --slba 100 --length "$bs" -o "$W/small.got" >>"$W/small.out" 2>>"$W/small.err" &&
    cmp -s "$W/small.bin" "$W/small.got"; then
    pass in-capsule-write
else
    fail in-capsule-write "$(tail -1 "$W/small.err")"
fi

# A wrong NQN: the target refuses Connect, and the error says which field.
must_fail wrong-nqn "invalid subsystem NQN" "$W/wrong-nqn" \
    "$TIMEOUT" 60 "$RCTB" nvme connect --backend verbs --device "$DEV" -a "$NVMET_ADDR" -s "$NVMET_PORT" \
    -n "nqn.2024-01.io.rctb:no-such-subsystem" || fails=1

# A wrong port: nothing listens there.
must_fail wrong-port "$NVMET_ADDR:4421" "$W/wrong-port" \
    "$TIMEOUT" 60 "$RCTB" nvme connect --backend verbs --device "$DEV" -a "$NVMET_ADDR" -s 4421 \
    -n "$NVMET_NQN" --timeout 5 || fails=1

# ---- the kernel host against rctb's target on verbs, a file namespace
VNQN=nqn.2026-01.io.rctb:verbs-target
dd if=/dev/urandom of="$W/vt.img" bs=1048576 count=4 2>/dev/null
cp "$W/vt.img" "$W/vt.orig"
dd if=/dev/urandom of="$W/vt-new.bin" bs=1048576 count=1 2>/dev/null
"$TIMEOUT" 120 "$RCTB" nvme target --backend verbs --device "$DEV" -s 4421 -n "$VNQN" \
    --namespace "$W/vt.img:4096" --for 100 >"$W/vt-target.out" 2>"$W/vt-target.err" &
vtpid=$!
wait_listening "$W/vt-target.out"
before=" $(ls /dev/nvme*n* 2>/dev/null | tr '\n' ' ') "
if ! grep -q "^LISTENING $DEV_IP:4421 $VNQN" "$W/vt-target.out"; then
    fail verbs-target/listen "$(last_line "$W/vt-target.err") $(last_line "$W/vt-target.out")"
elif ! "$TIMEOUT" 60 nvme connect -t rdma -a "$DEV_IP" -s 4421 -w "$PEER_IP" -n "$VNQN" >"$W/vt-connect.log" 2>&1; then
    fail verbs-target/connect "$(last_line "$W/vt-connect.log")"
else
    if ! blk=$(new_block_device "$before" '/dev/nvme*n1'); then
        fail verbs-target/connect "no new /dev/nvme*n1"
    else
        pass "verbs-target/connect $blk ($(cat "/sys/block/${blk#/dev/}/size") sectors)"
        if dd if="$blk" of="$W/vt-read.bin" bs=1048576 count=4 iflag=direct 2>"$W/vt-dd.log" &&
            cmp -s "$W/vt-read.bin" "$W/vt.orig"; then
            pass "verbs-target/read the block device reads the file's 4 MiB"
        else
            fail verbs-target/read "$(last_line "$W/vt-dd.log")"
        fi
        if dd if="$W/vt-new.bin" of="$blk" bs=1048576 seek=2 count=1 oflag=direct conv=fsync 2>>"$W/vt-dd.log"; then
            pass "verbs-target/write 1 MiB O_DIRECT and fsync"
        else
            fail verbs-target/write "$(last_line "$W/vt-dd.log")"
        fi
    fi
    "$TIMEOUT" 60 nvme disconnect -n "$VNQN" >/dev/null 2>&1
fi
kill -9 "$vtpid" 2>/dev/null
wait "$vtpid" 2>/dev/null
# Killed, not stopped: what the fsync flushed must be in the file anyway.
if dd if="$W/vt.img" bs=1048576 skip=2 count=1 2>/dev/null | cmp -s - "$W/vt-new.bin" &&
    dd if="$W/vt.img" bs=1048576 count=2 2>/dev/null | cmp -s -n 2097152 - "$W/vt.orig"; then
    pass "verbs-target/durable the flushed MiB is in the file after kill -9, the rest untouched"
else
    fail verbs-target/durable "the file does not hold what the host flushed"
fi
cat "$W/vt-target.out"
exit $fails

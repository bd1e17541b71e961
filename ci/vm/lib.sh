# Shell helpers shared by the guest's /init, checks.sh and bench.sh.
# POSIX sh: it runs under busybox sh in the VM and under bash/dash on a host.
#
# Needs $HWV_RESULTS (the results file) for result().

# coreutils timeout (busybox's applet would shadow a bare `timeout`, and it
# reports a timeout as 143 rather than 124)
export TIMEOUT=/usr/bin/timeout

uptime_s() { cut -d' ' -f1 /proc/uptime; }

# say TEXT...: a progress line (the host shows these as they come)
say() { echo "HWV-SAY T+$(uptime_s)s: $*"; }

# result PASS|FAIL NAME [WHY...]: record one check. NAME has no spaces.
result() {
    _st=$1 _name=$2
    shift 2
    if [ $# -gt 0 ]; then
        _line="$_st $_name $*"
    else
        _line="$_st $_name"
    fi
    # one line, whatever WHY held
    _line=$(printf '%s' "$_line" | tr '\n\r' '  ')
    echo "HWV-RESULT $_line"
    echo "$_line" >>"$HWV_RESULTS"
}

# wait_active DEV SECONDS: wait until port 1 of DEV is ACTIVE
wait_active() {
    _i=0
    while [ "$_i" -lt $(($2 * 10)) ]; do
        case "$(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null)" in
            *ACTIVE*) return 0 ;;
        esac
        sleep 0.1
        _i=$((_i + 1))
    done
    return 1
}

# gid_index DEV: index of the RoCE v2 IPv4-mapped GID (::ffff:a.b.c.d) of
# port 1, empty when there is none (InfiniBand, or an IPv6-only RoCE port).
# Index 0 is the link-local fe80:: GID, and RTR with it to an IPv4 peer fails.
gid_index() {
    for _g in 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
        _gid=$(cat "/sys/class/infiniband/$1/ports/1/gids/$_g" 2>/dev/null) || continue
        case "$_gid" in
            0000:0000:0000:0000:0000:ffff:*)
                case "$(cat "/sys/class/infiniband/$1/ports/1/gid_attrs/types/$_g" 2>/dev/null)" in
                    *v2*) echo "$_g"; return 0 ;;
                esac
                ;;
        esac
    done
}

# gid_ipv4 DEV INDEX: the IPv4 address in an IPv4-mapped GID
gid_ipv4() {
    _gid=$(cat "/sys/class/infiniband/$1/ports/1/gids/$2" 2>/dev/null) || return 1
    _hi=$(echo "$_gid" | cut -d: -f7)
    _lo=$(echo "$_gid" | cut -d: -f8)
    printf '%d.%d.%d.%d\n' "0x$(echo "$_hi" | cut -c1-2)" "0x$(echo "$_hi" | cut -c3-4)" \
        "0x$(echo "$_lo" | cut -c1-2)" "0x$(echo "$_lo" | cut -c3-4)"
}

# gid_netdev DEV INDEX: the netdev a RoCE GID belongs to
gid_netdev() {
    cat "/sys/class/infiniband/$1/ports/1/gid_attrs/ndevs/$2" 2>/dev/null
}

# capture_start LOG PCAP IFACE [NETNS]: tcpdump RoCEv2 (UDP 4791) and ARP
# on IFACE (in network namespace NETNS when given) into PCAP, in the
# background, tcpdump's own output in LOG; returns once it listens (at most
# 5 s). Sets CAPTURE_PID; capture_stop ends it.
capture_start() {
    _log=$1 _pcap=$2 _if=$3
    if [ -n "${4:-}" ]; then
        set -- /usr/bin/ip netns exec "$4" tcpdump
    else
        set -- tcpdump
    fi
    "$@" -Z root -U -i "$_if" -s 0 -w "$_pcap" 'udp port 4791 or arp' >"$_log" 2>&1 &
    CAPTURE_PID=$!
    _i=0
    while [ $_i -lt 50 ] && ! grep -q listening "$_log" 2>/dev/null; do
        sleep 0.1
        _i=$((_i + 1))
    done
}

# capture_stop: let tcpdump see the last frames, then end it
capture_stop() {
    [ -n "${CAPTURE_PID:-}" ] || return 0
    sleep 0.5
    kill -INT "$CAPTURE_PID" 2>/dev/null
    wait "$CAPTURE_PID" 2>/dev/null
    CAPTURE_PID=""
}

# must_fail CHECK TEXT OUT CMD...: a check that CMD fails, saying TEXT (a
# fixed string) on stderr. Prints `PASS CHECK` or `FAIL CHECK why` (a hook's
# result line), keeps stdout in OUT.out and stderr in OUT.err, echoes the
# latter; returns 1 on FAIL.
must_fail() {
    _chk=$1 _txt=$2 _out=$3
    shift 3
    if "$@" >"$_out.out" 2>"$_out.err"; then
        echo "FAIL $_chk it succeeded"
        _rc=1
    elif grep -qF -- "$_txt" "$_out.err"; then
        echo "PASS $_chk"
        _rc=0
    else
        echo "FAIL $_chk unclear error: $(last_line "$_out.err")"
        _rc=1
    fi
    cat "$_out.err"
    return $_rc
}

# last_line FILE: the last non-empty line of FILE, for a FAIL reason
last_line() {
    _l=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-200)
    echo "${_l:-(no output)}"
}

# needs_vm_and_rctb WHY: the start of a hook that changes the machine (the
# udp namespace, rxe2): outside the VM it passes as host-mode saying WHY
# it needs a throw-away VM, and without an rctb binary it fails; either
# way the hook ends here.
needs_vm_and_rctb() {
    if [ "${HWV_MODE:-vm}" != vm ]; then
        echo "PASS host-mode (needs a throw-away VM: $1)"
        exit 0
    fi
    if [ -z "${RCTB:-}" ] || [ ! -x "$RCTB" ]; then
        echo "FAIL rctb no rctb binary (see the build check)"
        exit 1
    fi
}

# udp_ns_up: the udp backend's corner of the VM (checks.d/udp.sh,
# bench.d/udp.sh): a veth pair, veth2 (10.10.2.1) carrying soft-RoCE device
# rxe2, and veth3 (10.10.2.2) in network namespace "udp", which has no rxe
# device, so UDP port 4791 is free there for a user-space RoCEv2 peer.
# Prints why and returns 1 when something failed. udp_ns_down undoes it.
udp_ns_up() {
    _ip=/usr/bin/ip
    mkdir -p /run/netns
    $_ip netns add udp || { echo "ip netns add udp failed"; return 1; }
    $_ip link add veth2 type veth peer name veth3 || { echo "ip link add veth2 failed"; return 1; }
    $_ip link set veth3 netns udp
    $_ip addr add 10.10.2.1/24 dev veth2
    $_ip link set veth2 up
    sysctl -qw net.ipv4.conf.veth2.rp_filter=0
    $_ip netns exec udp $_ip link set lo up
    $_ip netns exec udp $_ip addr add 10.10.2.2/24 dev veth3
    $_ip netns exec udp $_ip link set veth3 up
    # The backlog is not per namespace on this kernel: set it globally, best effort.
    sysctl -qw net.core.netdev_max_backlog=10000 2>/dev/null || true
    /usr/bin/rdma link add rxe2 type rxe netdev veth2 || { echo "rdma link add rxe2 failed"; return 1; }
    wait_active rxe2 20 || { echo "rxe2 port 1 not ACTIVE"; return 1; }
}

udp_ns_down() {
    /usr/bin/rdma link delete rxe2 2>/dev/null
    /usr/bin/ip link del veth2 2>/dev/null
    /usr/bin/ip netns del udp 2>/dev/null
    return 0
}

# hook_timeout FILE: a hook script's time budget in s: its own
# `# hwv-timeout: S` header line when that is longer than HWV_T_CHECK (for
# hooks that need more than the default under TCG), else HWV_T_CHECK.
hook_timeout() {
    _ht=$(sed -n 's/^# hwv-timeout: *\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1)
    if [ -n "$_ht" ] && [ "$_ht" -gt "${HWV_T_CHECK:-90}" ]; then
        echo "$_ht"
    else
        echo "${HWV_T_CHECK:-90}"
    fi
}

# udp_pair_up [LOSS]: two network namespaces joined by a veth pair, for
# `rctb run SCENARIO --backend udp` across namespaces: rctb-a (rctb-va,
# 10.91.0.1) and rctb-b (rctb-vb, 10.91.0.2), the addresses of
# scenarios/udp-pair.toml. With LOSS (a percentage, e.g. 3), tc netem on
# both ends loses that share of the frames each way (needs sch_netem).
# Neither namespace has an rxe device, so UDP port 4791 is free in both.
# Prints why and returns 1 when something failed; udp_pair_down undoes it.
udp_pair_up() {
    _ip=/usr/bin/ip
    mkdir -p /run/netns
    udp_pair_down
    $_ip netns add rctb-a || { echo "ip netns add rctb-a failed"; return 1; }
    $_ip netns add rctb-b || { echo "ip netns add rctb-b failed"; return 1; }
    $_ip link add rctb-va netns rctb-a type veth peer name rctb-vb netns rctb-b ||
        { echo "ip link add rctb-va (veth) failed"; return 1; }
    for _s in a:1 b:2; do
        _n=${_s%%:*} _h=${_s##*:}
        $_ip -n "rctb-$_n" link set lo up
        $_ip -n "rctb-$_n" addr add "10.91.0.$_h/24" dev "rctb-v$_n"
        $_ip -n "rctb-$_n" link set "rctb-v$_n" up
        if [ -n "${1:-}" ]; then
            $_ip netns exec "rctb-$_n" tc qdisc add dev "rctb-v$_n" root netem loss "$1%" ||
                { echo "tc netem loss $1% on rctb-v$_n failed (is sch_netem there?)"; return 1; }
        fi
    done
}

udp_pair_down() {
    /usr/bin/ip netns del rctb-a 2>/dev/null
    /usr/bin/ip netns del rctb-b 2>/dev/null
    return 0
}

# nvmet_port_up N ADDR: nvmet port N on ADDR:4420 (RDMA) serving the VM's
# nvmet subsystem $NVMET_NQN (set up by /init); nvmet_port_down N undoes it.
nvmet_port_up() {
    _c=/sys/kernel/config/nvmet
    [ -n "${NVMET_NQN:-}" ] && mkdir "$_c/ports/$1" 2>/dev/null &&
        echo rdma >"$_c/ports/$1/addr_trtype" && echo ipv4 >"$_c/ports/$1/addr_adrfam" &&
        echo "$2" >"$_c/ports/$1/addr_traddr" && echo 4420 >"$_c/ports/$1/addr_trsvcid" &&
        ln -s "$_c/subsystems/$NVMET_NQN" "$_c/ports/$1/subsystems/$NVMET_NQN"
}

nvmet_port_down() {
    rm -f "/sys/kernel/config/nvmet/ports/$1/subsystems/$NVMET_NQN"
    rmdir "/sys/kernel/config/nvmet/ports/$1" 2>/dev/null
    return 0
}

# fio_randread BLOCKDEV QD SECONDS OUT: 4 KiB random reads through the
# kernel's block layer (libaio, O_DIRECT) at queue depth QD; prints the
# read IOPS (terse v3 field 8), nothing when fio failed (OUT.err says why).
fio_randread() {
    "$TIMEOUT" $(($3 + 60)) /usr/bin/fio --name=randread --filename="$1" --rw=randread --bs=4k --direct=1 \
        --ioengine=libaio --iodepth="$2" --numjobs=1 --runtime="$3" --time_based --norandommap \
        --randrepeat=0 --output-format=terse --terse-version=3 >"$4.terse" 2>"$4.err" &&
        awk -F';' 'NF > 8 { print $8 }' "$4.terse" | tail -n 1
}

# wait_listening FILE: waits up to 10 s for a server's `LISTENING ...` line
# in FILE (its stdout); returns 0 once it is there.
wait_listening() {
    _wl=0
    while [ $_wl -lt 100 ] && ! grep -q '^LISTENING' "$1" 2>/dev/null; do
        sleep 0.1
        _wl=$((_wl + 1))
    done
    grep -q '^LISTENING' "$1"
}

# new_block_device BEFORE GLOB: waits up to 10 s for a block device that
# matches GLOB (e.g. /dev/nvme*n1) and is not in BEFORE (" dev dev ... ",
# spaces around each); prints it.
new_block_device() {
    _nb=0
    while [ $_nb -lt 100 ]; do
        for _d in $2; do
            case "$1" in
                *" $_d "*) ;;
                *) [ -b "$_d" ] && echo "$_d" && return 0 ;;
            esac
        done
        sleep 0.1
        _nb=$((_nb + 1))
    done
    return 1
}

# ------------------------------------------------------------------ cost
# Where the time goes, per operation. Each line goes to $HWV_OUT/cost.txt
# (the host keeps it as ci/out/cost.txt; ci/plot-bench --cost summarises it):
#   <workload> <tool> ops=<n> user_s=<x> sys_s=<y> vcsw=<n> ivcsw=<n>
#   <workload> <tool> syscalls=<n> ops=<n> per_op=<x> top=<name:count,...>
#   <workload> <tool> rxe <dev:counter>=+<n> ...
# Tools name the side: rctb/rx, rctb/tx, perftest/rx, perftest/tx, ...

# cost_time: the command that times a child and reports its rusage with
# GNU time's -f/-o (busybox's applet in the VM; GNU time on a host), empty
# when there is none
cost_time() {
    if [ -z "${COST_TIME+set}" ]; then
        COST_TIME=""
        if busybox time -f %U -o /dev/null true 2>/dev/null; then
            COST_TIME="busybox time"
        elif [ -x /usr/bin/time ] && /usr/bin/time -f %U -o /dev/null true 2>/dev/null; then
            COST_TIME=/usr/bin/time
        fi
    fi
    echo "$COST_TIME"
}

# cost_run WORKLOAD TOOL OPS -- CMD...: runs CMD (in the foreground, or put
# the call in the background with &) and returns its exit status. It appends
# the rusage line of CMD and everything CMD waited for (wait4 of the child:
# user and system CPU s, voluntary and involuntary context switches) to
# cost.txt. OPS is the operation count (frames, I/Os, iterations), or ? when
# it is known only afterwards (see cost_set_ops).
# With COST_STRACE=1 in the environment, CMD runs under `strace -c -f`
# instead and the line is the syscall count; CPU times under strace mean
# nothing, so that is a separate run whose throughput is thrown away (the
# bench scripts do one when HWV_STRACE=1). Its top six system calls are
# listed as name:calls@usecs-per-call (strace's own figure, the time in the
# call as the tracer saw it: a guide to where a run waits, not a cost).
cost_run() {
    _cw=$1 _ct=$2 _co=$3
    shift 3
    [ "${1:-}" = -- ] && shift
    _cf=$(mktemp "${TMPDIR:-/tmp}/cost.XXXXXX")
    if [ "${COST_STRACE:-0}" = 1 ]; then
        if ! command -v strace >/dev/null 2>&1; then
            echo "$_cw $_ct syscalls=? (no strace)" >>"$HWV_OUT/cost.txt"
            rm -f "$_cf"
            "$@"
            return $?
        fi
        strace -c -f -o "$_cf" -- "$@"
        _crc=$?
        # rows: % time, seconds, usecs/call, calls, [errors], syscall
        awk -v w="$_cw" -v t="$_ct" -v ops="$_co" '
            $NF == "total" { total = $4; next }
            $1 ~ /^[0-9.]+$/ && NF >= 5 { n++; name[n] = $NF; calls[n] = $4; us[n] = $3 }
            END {
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                    if (calls[j] + 0 > calls[i] + 0) {
                        c = calls[i]; calls[i] = calls[j]; calls[j] = c
                        s = name[i]; name[i] = name[j]; name[j] = s
                        u = us[i]; us[i] = us[j]; us[j] = u
                    }
                top = ""
                for (i = 1; i <= n && i <= 6; i++) top = top (i > 1 ? "," : "") name[i] ":" calls[i] "@" us[i] "us"
                per = (ops ~ /^[0-9]+$/ && ops > 0) ? sprintf("%.2f", total / ops) : "?"
                printf "%s %s syscalls=%d ops=%s per_op=%s top=%s\n", w, t, total, ops, per, top
            }' "$_cf" >>"$HWV_OUT/cost.txt"
        rm -f "$_cf"
        return $_crc
    fi
    _ctm=$(cost_time)
    if [ -z "$_ctm" ]; then
        echo "$_cw $_ct ops=$_co user_s=? sys_s=? vcsw=? ivcsw=? (no time command)" >>"$HWV_OUT/cost.txt"
        rm -f "$_cf"
        "$@"
        return $?
    fi
    # shellcheck disable=SC2086 # COST_TIME is one or two words
    $_ctm -f '%U %S %w %c' -o "$_cf" "$@"
    _crc=$?
    # the last line is ours (a "Command exited with non-zero status" line may precede it)
    tail -n 1 "$_cf" | awk -v w="$_cw" -v t="$_ct" -v ops="$_co" \
        'NF == 4 { printf "%s %s ops=%s user_s=%s sys_s=%s vcsw=%s ivcsw=%s\n", w, t, ops, $1, $2, $3, $4 }' \
        >>"$HWV_OUT/cost.txt"
    rm -f "$_cf"
    return $_crc
}

# cost_set_ops WORKLOAD TOOL N: fills in N for the last `ops=?` line of
# WORKLOAD TOOL (a time-based run, fio's, knows its count only afterwards),
# and its per_op when it is a syscalls line
cost_set_ops() {
    [ -f "$HWV_OUT/cost.txt" ] || return 0
    awk -v w="$1" -v t="$2" -v n="$3" '
        { line[NR] = $0 }
        $1 == w && $2 == t && / ops=\?( |$)/ { last = NR }
        END {
            for (i = 1; i <= NR; i++) {
                l = line[i]
                if (i == last) {
                    sub(/ ops=\?/, " ops=" n, l)
                    if (match(l, / syscalls=[0-9]+/) && n > 0)
                        sub(/ per_op=\?/, sprintf(" per_op=%.2f", substr(l, RSTART + 10, RLENGTH - 10) / n), l)
                }
                print l
            }
        }' \
        "$HWV_OUT/cost.txt" >"$HWV_OUT/cost.txt.new" && mv "$HWV_OUT/cost.txt.new" "$HWV_OUT/cost.txt"
}

# rxe_snap DEV...: every hw_counter of port 1 of each DEV, "dev:name=value"
# a line (rxe's: sent_pkts, rcvd_pkts, duplicate_request, out_of_seq_request,
# rcvd_rnr_err, send_rnr_err, completer_retry_err, retry_exceeded_err, ...),
# then net_snap's lines
rxe_snap() {
    for _d in "$@"; do
        for _f in "/sys/class/infiniband/$_d/ports/1/hw_counters"/*; do
            # read, not cat: no fork per counter (each costs ~30 ms under TCG)
            [ -r "$_f" ] && read -r _v <"$_f" 2>/dev/null && echo "$_d:${_f##*/}=$_v"
        done
    done
    net_snap
}

# net_snap: what the network under rxe did, "where:name=value" a line: each
# CPU's backlog (/proc/net/softnet_stat: packets processed, dropped because
# the backlog was full, and squeezed, i.e. the softirq ran out of budget),
# and each veth's drops. A packet lost here reaches rxe as a PSN gap
# (out_of_seq_request), as does one overtaken through another CPU's backlog.
net_snap() {
    _i=0
    while read -r _p _dr _sq _rest; do
        echo "cpu$_i:softnet_processed=$((0x$_p))"
        echo "cpu$_i:softnet_dropped=$((0x$_dr))"
        echo "cpu$_i:softnet_squeezed=$((0x$_sq))"
        _i=$((_i + 1))
    done </proc/net/softnet_stat 2>/dev/null
    for _n in /sys/class/net/veth*; do
        for _s in rx_packets rx_dropped tx_dropped; do
            [ -r "$_n/statistics/$_s" ] && read -r _v <"$_n/statistics/$_s" && echo "${_n##*/}:$_s=$_v"
        done
    done
}

# rxe_delta WORKLOAD TOOL BEFORE AFTER: the counters that moved between two
# rxe_snap outputs, appended to cost.txt as `<workload> <tool> rxe
# <dev:counter>=+<n> ...` and echoed
rxe_delta() {
    _rd=$(printf '%s\n%s\n' "$3" "$4" | awk -F= 'NF == 2 {
        if ($1 in a) { d = $2 - a[$1]; if (d != 0) printf " %s=%s%d", $1, (d > 0 ? "+" : ""), d } else a[$1] = $2 }')
    echo "$1 $2 rxe${_rd:- (none moved)}" | tee -a "$HWV_OUT/cost.txt"
}

# xarg GID_INDEX: perftest's "-x N" (nothing when the index is unknown)
xarg() { [ -n "$1" ] && echo "-x $1"; }

# perftest_run WORKLOAD TOOL SIZE ITERS FILE [EXTRA...]: one perftest pair
# (TOOL ib_send_bw or ib_write_bw, both sides with the options EXTRA, e.g.
# -t 32 -Q 1): the server on PEER pinned to CPU 0, the client on DEV pinned
# to CPU 1 (perftest times with the TSC, and a process moving between TCG
# vCPUs, whose TSCs differ, can measure 0 MB/s). Their output goes to
# FILE.srv and FILE.cli; each side's CPU cost to cost.txt (perftest/rx,
# perftest/tx) and, unless COST_STRACE=1 (a strace -c run, whose figure is
# not kept: prints nothing), the rxe counter deltas (perftest). Prints the
# client's average MB/s; returns 1 (printing nothing) when either side
# failed or measured nothing.
perftest_run() {
    _pw=$1 _pt=$2 _ps=$3 _pn=$4 _pf=$5
    shift 5
    # shellcheck disable=SC2046 # xarg is empty or two words
    cost_run "$_pw" perftest/rx "$_pn" -- taskset 1 "$TIMEOUT" 120 "$_pt" -d "$PEER" $(xarg "${PEER_GID:-}") \
        -F -s "$_ps" -n "$_pn" "$@" >"$_pf.srv" 2>&1 &
    _psrv=$!
    # the server listens within 1.5 s; under strace it takes longer
    if [ "${COST_STRACE:-0}" = 1 ]; then sleep 5; else sleep 1.5; fi
    _pc0=$(rxe_snap "$DEV" "$PEER")
    # shellcheck disable=SC2046
    cost_run "$_pw" perftest/tx "$_pn" -- taskset 2 "$TIMEOUT" 120 "$_pt" -d "$DEV" $(xarg "${DEV_GID:-}") \
        -F -s "$_ps" -n "$_pn" "$@" 127.0.0.1 >"$_pf.cli" 2>&1
    _prc=$?
    wait $_psrv
    _psrc=$?
    [ "${COST_STRACE:-0}" = 1 ] && return 0
    rxe_delta "$_pw" perftest "$_pc0" "$(rxe_snap "$DEV" "$PEER")" >/dev/null
    # the result row: "<bytes> <iterations> <peak> <average> <Mpps>"
    _pbw=$(awk -v s="$_ps" '$1 == s && NF >= 4 { print $4 }' "$_pf.cli" | tail -n 1)
    if [ $_prc = 0 ] && [ $_psrc = 0 ] && [ -n "$_pbw" ] && [ "$_pbw" != 0.00 ]; then
        echo "$_pbw"
        return 0
    fi
    return 1
}

# strace_wanted: whether to do the extra strace run (HWV_STRACE=1 and strace here)
strace_wanted() {
    [ "${HWV_STRACE:-0}" = 1 ] && command -v strace >/dev/null 2>&1
}

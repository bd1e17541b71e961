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

# last_line FILE: the last non-empty line of FILE, for a FAIL reason
last_line() {
    _l=$(grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 | cut -c1-200)
    echo "${_l:-(no output)}"
}

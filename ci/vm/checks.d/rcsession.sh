#!/bin/sh
# rcsession: the RC session server (rctb_core::rcsession) on real verbs.
# `rctb rc-session selftest` runs the server on PEER (rxe0) and the client
# on DEV (rxe1) in one process: the control plane (PREPARE, READY, the
# staging copy, the PUT commit) is in-process, the data phase is one RDMA
# WRITE_WITH_IMM per session over RC between the devices. RCS_TRANSFERS
# (1000) GETs and PUTs: the edges first (GET and PUT of 1 B and of
# RCS_MAX_SIZE, 8 MiB), then sizes log-uniform in 1 B..RCS_DRAW_MAX (1 MiB:
# log-uniform up to 8 MiB would move about 530 MB, several minutes of rxe
# under TCG); every byte checked, every session reaped.
#
# Checks: selftest (it ran and passed), transfers (all completed, GETs and
# PUTs), sizes (both edges reached for GET and PUT), data (no mismatch, no
# error), reaped (no session, staging byte, QP or leak left).
#
# Time: the log's "transfers:" and "time" lines. In the TCG VM on a quiet
# host, 1000 sessions with sizes up to 256 KiB took 17 s (about 15 ms of
# verbs calls per session: PD, CQ, QP, MR, QP transitions, teardown); on a
# loaded host several times that, hence:
# hwv-timeout: 150
set -u
: "${RCS_TRANSFERS:=1000}" "${RCS_MAX_SIZE:=8MiB}" "${RCS_DRAW_MAX:=1MiB}" "${RCS_SEED:=1}"
: "${TIMEOUT:=timeout}" "${HWV_OUT:=/tmp}"
LOG=$HWV_OUT/rcsession.log
fails=0
pass() { echo "PASS $*"; }
fail() {
    echo "FAIL $*"
    fails=1
}
if [ -z "${RCTB:-}" ] || [ -z "${DEV:-}" ] || [ -z "${PEER:-}" ]; then
    echo "FAIL setup no rctb binary or no devices (RCTB=${RCTB:-} DEV=${DEV:-} PEER=${PEER:-})"
    exit 1
fi
$TIMEOUT 140 "$RCTB" rc-session selftest --backend verbs --device "$DEV" --peer "$PEER" \
    --gid-index "${DEV_GID:-1}" --transfers "$RCS_TRANSFERS" --max-size "$RCS_MAX_SIZE" --draw-max "$RCS_DRAW_MAX" \
    --seed "$RCS_SEED" --time-limit 130s >"$LOG" 2>&1
rc=$?
echo "---- rc-session selftest (exit $rc)"
sed 's/^/  | /' "$LOG"

res=$(grep '^RESULT ' "$LOG" | tail -n 1)
val() { echo "$res" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
if [ $rc = 0 ] && [ "${res#RESULT PASS}" != "$res" ]; then
    pass selftest "$(grep '^transfers:' "$LOG")"
else
    fail selftest "exit $rc: $(grep -v '^[[:space:]]*$' "$LOG" | grep -v '^RESULT' | tail -n 1 | cut -c1-200)"
fi
if [ "$(val transfers)" = "$RCS_TRANSFERS" ] && [ "${res#*gets=0 }" = "$res" ] && [ "${res#*puts=0 }" = "$res" ]; then
    pass transfers "$(val transfers) transfers: $(val gets) GET, $(val puts) PUT, $(val bytes) bytes"
else
    fail transfers "want $RCS_TRANSFERS with GETs and PUTs: ${res:-no RESULT line}"
fi
case $RCS_MAX_SIZE in
*MiB) max=$((${RCS_MAX_SIZE%MiB} * 1048576)) ;;
*KiB) max=$((${RCS_MAX_SIZE%KiB} * 1024)) ;;
*) max=$RCS_MAX_SIZE ;;
esac
if grep -q "^sizes: GET 1\.\.$max bytes, PUT 1\.\.$max bytes" "$LOG"; then
    pass sizes "GET and PUT of 1 and $max bytes"
else
    fail sizes "want 1..$max for both: $(grep '^sizes:' "$LOG")"
fi
if [ -n "$res" ] && [ "$(val mismatches)" = 0 ] && [ "$(val errors)" = 0 ]; then
    pass data "every byte as sent ($(val busy) BUSY retries)"
else
    fail data "${res:-no RESULT line}; $(grep -m 3 'error:' "$LOG" | tr '\n' ' ' | cut -c1-300)"
fi
if [ -n "$res" ] && [ "$(val held)" = 0 ] && [ "$(val leaked)" = 0 ]; then
    pass reaped "$(grep '^after:' "$LOG")"
else
    fail reaped "${res:-no RESULT line}"
fi
exit $fails

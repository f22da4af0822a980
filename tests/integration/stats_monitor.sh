#!/bin/bash
# vma_stats against a process holding fake sockets (no privileges needed).
#   BUILDDIR=/path/to/build tests/integration/stats_monitor.sh
set -u
B=${BUILDDIR:?BUILDDIR must name the build tree}
APP=$B/tests/integration/stats_fake_app
VS=$B/tools/vma_stats/vma_stats
D=$(mktemp -d /tmp/stats-it.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
has() { grep -qF -- "$2" <<<"$1" || fail "$3: missing '$2' in: $1"; }

start() { # start OUT ARGS... -> sets APP_PID
	"$APP" "$D" "$@" >"$D/out" 2>&1 & APP_PID=$!; PIDS+=("$APP_PID")
	for _ in $(seq 50); do grep -q ready "$D/out" && return; sleep 0.1; done
	fail "helper did not start: $(cat "$D/out")"
}

start 2 1000 1024
o=$("$VS" -k "$D" -p "$APP_PID" -c 1) || fail "-p exit $?"
has "$o" "Fd=[100]" "-p"; has "$o" "Fd=[101]" "-p"
has "$o" "Rx Offload: 1000 / 1000 / 0 / 0 [kilobytes/packets/eagains/errors]" "-p counters"
has "$o" "Tx Offload: 1000 / 1000 / 0 / 0 [kilobytes/packets/eagains/errors]" "-p counters"
has "$o" "Rx poll: 0 / 1000 (100.00%) [miss/hit]" "-p poll"
o=$("$VS" -k "$D" -c 1) || fail "-f"; has "$o" "Fd=[100]" "find pid"
o=$("$VS" -k "$D" -n stats_fake_app -c 1) || fail "-n"; has "$o" "Fd=[101]" "-n"
o=$("$VS" -k "$D" -p "$APP_PID" -c 1 -s 101); grep -q "Fd=\[100\]" <<<"$o" && fail "-s kept fd 100"
has "$o" "Fd=[101]" "-s"
o=$("$VS" -k "$D" -p "$APP_PID" -c 1 -v 2); has "$o" "Rx byte: cur 0 / max 0 / dropped 0 / limit 65536" "-v 2"
has "$o" "select() Rx Ready: 0 / 1000 [os/offload]" "-v 2 iomux"
o=$("$VS" -k "$D" -p "$APP_PID" -c 1 -v 3); has "$o" "RING=[0] (veth0)" "-v 3"
has "$o" "BUFFER_POOL(RX)=[0] Size: 4096" "-v 3 pool"
o=$("$VS" -k "$D" -p "$APP_PID" -c 1 -v 4); has "$o" "[224.4.1.0]          100" "-v 4"
o=$("$VS" -k "$D" -v 5); has "$o" "udp   Yes       10.0.0.1:11111" "-v 5"; has "$o" "$APP_PID/stats_fake_app" "-v 5"
o=$("$VS" -k "$D" -p "$APP_PID" -l 5) || fail "-l: $o"; has "$o" "log level set to 5" "-l"
sleep 0.2; has "$(cat "$D/out")" "level=5" "-l in the process"
o=$("$VS" -k "$D" -p "$APP_PID" -l debug -D 2) || fail "-D"; has "$(cat "$D/out")" "details=2" "-D"
o=$("$VS" -k "$D" -p "$APP_PID" -S 100 info) || fail "-S: $o"
sleep 0.2; has "$(cat "$D/out")" "[fd=100] Rx Offload: 1000 KB / 1000" "-S dump"
o=$("$VS" -k "$D" -p "$APP_PID" -z) || fail "-z"
o=$("$VS" -k "$D" -p "$APP_PID" -c 1); has "$o" "Rx Offload: 0 / 0 / 0 / 0" "-z zeroed"
kill "$APP_PID"; wait "$APP_PID"
[ -e "$D/vmastat.$APP_PID" ] && fail "file left at exit"

STATS_FAKE_TICK=1 start 1 0 1024
o=$("$VS" -k "$D" -p "$APP_PID" -d 2 -c 1); has "$o" "pkt/s" "-d 2"
rate=$(awk '$1=="100" && $2=="Rx:" {print $3}' <<<"$o")
[ -n "$rate" ] && [ "$rate" -ge 60 ] && [ "$rate" -le 110 ] || fail "-d 2 rate '$rate' not ~100/s"
kill "$APP_PID"; wait "$APP_PID"

VMA_STATS_FD_NUM=2 start 5 10 100
o=$("$VS" -k "$D" -p "$APP_PID" -c 1); [ "$(grep -c 'Fd=\[' <<<"$o")" = 2 ] || fail "FD_NUM overflow: $o"
kill "$APP_PID"; wait "$APP_PID"

o=$("$VS" -k "$D" -c 1 2>&1) && fail "no process: exit 0"; has "$o" "Failed to identify process" "none"
o=$("$VS" -k "$D" -p 999999 -c 1 2>&1) && fail "no pid"; has "$o" "no process with pid 999999" "gone"
cp /etc/hostname "$D/vmastat.999998"            # stale file of a dead pid
"$VS" -k "$D" -F -c 1 >/dev/null 2>&1; [ -e "$D/vmastat.999998" ] || fail "-F removed a stale file"
"$VS" -k "$D" -c 1 >/dev/null 2>&1; [ -e "$D/vmastat.999998" ] && fail "stale file kept"
sleep 60 & SL=$!; PIDS+=("$SL"); head -c 5000 /dev/urandom >"$D/vmastat.$SL"
o=$("$VS" -k "$D" -p "$SL" -c 1 2>&1) && fail "garbage accepted"; has "$o" "not a VMA statistics file" "garbage"
echo "PASS: stats_monitor"

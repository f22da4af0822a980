#!/bin/bash
# ring_floor.sh [--check] [BUILD_DIR]: the latency floor of the AF_XDP ring
# against the kernel, in one run. In the two-namespace testbed the same
# busy-polling UDP ping-pong client ($TB_PREFIX-a, 64 B) talks alternately to
#   kernel: udp_echo_kernel (busy-polling kernel socket) in $TB_PREFIX-b on PORT
#   ring:   ring_echo $TB_PREFIX-b0 PORT (AF_XDP, no stack)  in $TB_PREFIX-b
# for ROUNDS rounds and prints both half round trips, their ratio (median of
# the rounds' averages, and best of each) as text and one JSON line.
# --check: exit 1 when the median ratio is above MAX_RATIO (default 0.85).
# Env: TB_PREFIX (vmafloor: own testbed namespaces), PORT (7000) COUNT (50000 per round) ROUNDS (3) SIZE (64) MAX_RATIO,
# PIN_CPUS=1 (taskset client to cpu0, server to cpu1: slower here, ~3.8 us ring).
# Exit 0 / 1 (failure, or --check over the limit) / 77 (cannot run here).
set -u

CHECK=0
[ "${1:-}" = --check ] && { CHECK=1; shift; }
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=${1:-${BUILD_DIR:-$PWD}}
BENCH=$BUILD/tests/bench
PORT=${PORT:-7000}
COUNT=${COUNT:-50000}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-64}
MAX_RATIO=${MAX_RATIO:-0.85}
TESTBED=$TOP/contrib/testbed.sh
export TB_PREFIX=${TB_PREFIX:-vmafloor}
P=$TB_PREFIX

skip() { echo "ring_floor: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, XDP)"
for p in ring_echo udp_echo_kernel udp_pp_client; do
	[ -x "$BENCH/$p" ] || skip "$BENCH/$p not built (run from the build dir or pass it; HAVE_XDP?)"
done
"$TESTBED" up pair >/dev/null || skip "testbed setup failed"

# Server and client each spin on a core of their own when there are two.
SERVER_CPU=() CLIENT_CPU=()
if [ "${PIN_CPUS:-0}" = 1 ] && [ "$(nproc)" -ge 2 ]; then SERVER_CPU=(taskset -c 1) CLIENT_CPU=(taskset -c 0); fi

SERVER_PID=
stop_server() {
	[ -n "$SERVER_PID" ] || return 0
	kill -INT "$SERVER_PID" 2>/dev/null
	wait "$SERVER_PID" 2>/dev/null
	SERVER_PID=
}
cleanup() { stop_server; "$TESTBED" down >/dev/null 2>&1; }
trap cleanup EXIT

# start_server NAME CMD...: waits for its "ready" line (5 s at most).
start_server() {
	local out=/tmp/ring_floor.$$.$1
	shift
	# nsenter (not ip netns exec) keeps the host's bpffs mount.
	nsenter --net=/run/netns/$P-b "${SERVER_CPU[@]}" "$@" >"$out" 2>"$out.err" &
	SERVER_PID=$!
	for _ in $(seq 50); do
		grep -q ready "$out" 2>/dev/null && return 0
		kill -0 $SERVER_PID 2>/dev/null || break
		sleep 0.1
	done
	cat "$out.err" >&2
	SERVER_PID=
	return 1
}

# measure -> prints "avg p50 p99"
measure() {
	local line
	line=$(ip netns exec $P-a timeout 60 "${CLIENT_CPU[@]}" "$BENCH/udp_pp_client" 198.18.0.2 "$PORT" "$COUNT" "$SIZE" 1000) || return 1
	echo "$line" | sed -n 's/.*lost=\([0-9]*\) avg_us=\([0-9.]*\) p50_us=\([0-9.]*\) p99_us=\([0-9.]*\).*/\2 \3 \4 \1/p'
}

K_AVGS=() R_AVGS=() K_P50=() R_P50=()
for round in $(seq "$ROUNDS"); do
	start_server kernel "$BENCH/udp_echo_kernel" "$PORT" || { echo "ring_floor: kernel echo server did not start"; exit 1; }
	read -r kavg kp50 kp99 klost < <(measure) || { echo "ring_floor: kernel round failed"; exit 1; }
	stop_server
	start_server ring "$BENCH/ring_echo" $P-b0 "$PORT" || { echo "ring_floor: ring_echo did not start"; exit 1; }
	read -r ravg rp50 rp99 rlost < <(measure) || { echo "ring_floor: ring round failed"; exit 1; }
	stop_server
	[ -n "${kavg:-}" ] && [ -n "${ravg:-}" ] || { echo "ring_floor: no measurement"; exit 1; }
	printf 'round %d: kernel avg %s p50 %s p99 %s us (lost %s) | ring avg %s p50 %s p99 %s us (lost %s)\n' \
		"$round" "$kavg" "$kp50" "$kp99" "$klost" "$ravg" "$rp50" "$rp99" "$rlost"
	K_AVGS+=("$kavg") R_AVGS+=("$ravg") K_P50+=("$kp50") R_P50+=("$rp50")
done

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
best() { printf '%s\n' "$@" | sort -g | head -1; }
KMED=$(median "${K_AVGS[@]}") RMED=$(median "${R_AVGS[@]}")
KBEST=$(best "${K_AVGS[@]}") RBEST=$(best "${R_AVGS[@]}")
KP50=$(median "${K_P50[@]}") RP50=$(median "${R_P50[@]}")
RATIO=$(awk -v r="$RMED" -v k="$KMED" 'BEGIN {printf "%.3f", r / k}')
RATIO_BEST=$(awk -v r="$RBEST" -v k="$KBEST" 'BEGIN {printf "%.3f", r / k}')
RATIO_P50=$(awk -v r="$RP50" -v k="$KP50" 'BEGIN {printf "%.3f", r / k}')

echo "kernel busy-poll UDP echo: half RTT avg $KMED us (median of $ROUNDS rounds, best $KBEST), p50 $KP50 us"
echo "ring_echo (AF_XDP):        half RTT avg $RMED us (median of $ROUNDS rounds, best $RBEST), p50 $RP50 us"
echo "ratio ring/kernel: $RATIO (best/best $RATIO_BEST, p50 $RATIO_P50; target <= $MAX_RATIO)"
printf '{"size":%s,"count":%s,"rounds":%s,"kernel_half_rtt_us":%s,"ring_half_rtt_us":%s,"kernel_best_us":%s,"ring_best_us":%s,"kernel_p50_us":%s,"ring_p50_us":%s,"ratio":%s,"ratio_best":%s,"ratio_p50":%s}\n' \
	"$SIZE" "$COUNT" "$ROUNDS" "$KMED" "$RMED" "$KBEST" "$RBEST" "$KP50" "$RP50" "$RATIO" "$RATIO_BEST" "$RATIO_P50"
rm -f /tmp/ring_floor.$$.*

if [ $CHECK = 1 ] && awk -v r="$RATIO" -v m="$MAX_RATIO" 'BEGIN {exit !(r > m)}'; then
	echo "ring_floor: FAIL: ratio $RATIO above $MAX_RATIO"
	exit 1
fi
exit 0

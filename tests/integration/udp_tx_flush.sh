#!/bin/bash
# Doorbell batching (docs/ring.md) never strands a send: a libvma sender in
# one namespace, a kernel receiver in the other (root; TB_PREFIX=vmatxf).
# Usage: udp_tx_flush.sh [BUILD_DIR | path/to/libvma.so]   exit 0/1/77.
# VMA_TEST_PRELOAD (e.g. the ASan runtime) goes before the library in LD_PRELOAD.
# The sender sleeps 1.5 s in raw nanosleep after its last send; the receiver
# gives up 0.7 s after the last datagram it saw. So every case proves the
# datagrams left while the sender made no libvma call (a frame held until
# exit counts as lost):
#   lone      one datagram
#   tail      40 back-to-back (the tail is held as a burst: the internal
#             thread must send it)
#   burst     100000 in chunks of 1000, sendmmsg and sendto alternately,
#             all arriving exactly once
# An echo server answering 100 requests that queued up, 11 us of computing
# each: all replies arrive, most of them held for the next (vma_stats; below).
# A sender that ends a burst of three sends and then computes, 20 times:
# after two stranded tails, the bursts leave whole (below, "bursts then
# computing").
# Then the tail of a burst of send() calls must leave when the sender blocks
# in libc without touching an offloaded fd (nanosleep, usleep, a condition
# variable, poll or read of a pipe): the last datagram within 30 ms of the
# first (0.1-0.7 ms here), where the internal thread, whose passes are made
# 100 ms apart here (VMA_PROGRESS_ENGINE_INTERVAL, VMA_TIMER_RESOLUTION_MSEC),
# takes about 100 ms (checked with the flush taken out, 2026-11-30).
set -u
ARG=${1:-$(dirname "$0")/../..}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "$ARG" ]; then
	BUILD=$ARG LIB=$ARG/src/vma/.libs/libvma.so
else
	LIB=$ARG BUILD=$(cd "$(dirname "$ARG")/../../.." && pwd)
fi
HELPER=$BUILD/tests/integration/udp_tx_flush
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
[ -x "$HELPER" ] || make -C "$BUILD" tests/integration/udp_tx_flush >/dev/null 2>&1
[ -x "$HELPER" ] || { echo "SKIP: no $HELPER (make check builds it)"; exit 77; }
LIB=$(readlink -f "$LIB")
export TB_PREFIX=vmatxf
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT
A="nsenter --net=/run/netns/vmatxf-a"
B="nsenter --net=/run/netns/vmatxf-b"
fail=0
OUT=$(mktemp -d /tmp/udp_tx_flush.XXXXXX)
trap 'rm -rf "$OUT"; bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT

# run_pair NAME PORT "RECV_ARGS" "WHAT" SENDER_ENV... -- SENDER_ARGS...: a
# kernel receiver (udp_tx_flush recv PORT RECV_ARGS) in B, the libvma sender
# in A; PASS "NAME: WHAT" when both exit 0.
run_pair() {
	local name=$1 port=$2 rargs=$3 what=$4 rc src
	shift 4
	local envs=()
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	# shellcheck disable=SC2086 # RECV_ARGS is a list of numbers
	$B "$HELPER" recv "$port" $rargs >"$OUT/$name.recv" 2>&1 &
	local rpid=$!
	for _ in $(seq 50); do grep -q ready "$OUT/$name.recv" && break; sleep 0.1; done
	$A env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_TRACELEVEL=2 "${envs[@]}" \
		timeout 60 "$HELPER" "$@" >"$OUT/$name.send" 2>&1
	src=$?
	wait $rpid
	rc=$?
	sed 's/^/    /' "$OUT/$name.send" "$OUT/$name.recv" | grep -v ready
	if [ $src = 0 ] && [ $rc = 0 ]; then
		echo "PASS: $name: $what"
	else
		echo "FAIL: $name: sender exit $src, receiver exit $rc"
		fail=1
	fi
}

# run_case NAME PORT COUNT CHUNK
run_case() {
	run_pair "$1" "$2" "$3 15000 700" "$3 datagrams arrived while the sender slept" \
		-- send 198.18.0.2 "$2" "$3" "$4" 1500
}
run_case lone 12201 1 1
run_case tail 12202 40 40
run_case burst 12203 100000 1000

# run_blocked HOW PORT
run_blocked() {
	run_pair "burst then $1" "$2" "40 15000 700 30000" "40 datagrams, the tail sent when the sender blocked" \
		VMA_PROGRESS_ENGINE_INTERVAL=100 VMA_TIMER_RESOLUTION_MSEC=100 -- tail 198.18.0.2 "$2" 40 300 "$1"
}
run_blocked nanosleep 12204
run_blocked usleep 12205
run_blocked cond 12206
run_blocked poll 12207
run_blocked read 12208

# A thread that sends three datagrams back to back and then computes,
# calling nothing, 20 ms before the next three (one spinning on a queue of
# its own between messages). The last ones of each burst are held (the
# first send's doorbell, the transmit itself in copy mode, takes longer
# than the burst gap here, so a pair would not be); nothing of ours runs to
# flush them, so the internal thread (10-20 ms) or the next burst's send
# (20 ms) does: a stranded tail. After two in a row, holding stops for a
# second (ring_hold.h): the other 18 bursts leave whole, their last
# datagram within 2 ms of their first. Before, 12-20 of the 20 waited about
# 10 ms (checked on c8936db, 2026-11-30).
run_pair "bursts then computing" 12209 "60 15000 700 0 2000 3 3" \
	"20 bursts of 3, the last datagram of each within 2 ms of its first (two stranded tails allowed, and one for noise)" \
	-- bursts 198.18.0.2 12209 20 3 20

# A server that answers requests which queued up while it was busy: a kernel
# client sends 100 at once, the libvma server (udp_tx_flush echo) computes
# 11 us for each before its reply. The replies are more than the burst gap
# apart, so the burst rule alone rings each (100 doorbells, none held); with
# requests still queued on the socket a reply may wait for the next ones
# (the server is quick: 11 us between its sends, under 20; ring_hold.h,
# docs/ring.md). All 100 replies must arrive once,
# the last while the server sleeps, and vma_stats must count at least 20 of
# them held (70-80, with 20-30 doorbells, here) in one of up to three
# rounds. Not a bound on every round: a held reply found 50 us late (the
# server preempted) is a stranded tail, and two in a row stop the holding
# for a second, after which every reply rings.
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
ECHO_N=100
# echo_round N: one server and one client; sets echo_ok (the replies) and
# held, bells (vma_stats).
echo_round() {
	local rpid spid src rc epid
	bells= held= echo_ok=0
	: >"$OUT/echo.stats"
	$B "$HELPER" recv 12211 $ECHO_N 15000 700 >"$OUT/echo.recv" 2>&1 &
	rpid=$!
	$A env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_TRACELEVEL=2 \
		timeout 60 "$HELPER" echo 12210 $ECHO_N 11 12211 3000 >"$OUT/echo.srv" 2>&1 &
	spid=$!
	for _ in $(seq 50); do grep -q ready "$OUT/echo.recv" && grep -q ready "$OUT/echo.srv" && break; sleep 0.1; done
	$B "$HELPER" send 198.18.0.1 12210 $ECHO_N $ECHO_N 0 >"$OUT/echo.send" 2>&1
	for _ in $(seq 100); do grep -q answered "$OUT/echo.srv" && break; sleep 0.1; done
	sleep 0.5   # the lane publishes its ring counters every 100 ms
	epid=$(pgrep -f "^$HELPER echo 12210" | head -1)
	[ -n "$epid" ] && [ -x "$VMA_STATS" ] &&
		"$VMA_STATS" -p "$epid" -v 3 -c 1 >"$OUT/echo.stats" 2>/dev/null &&
		bells=$(awk '/^Tx doorbells:/ {n += $3} END {print n + 0}' "$OUT/echo.stats") &&
		held=$(awk '/^Tx doorbells:/ {n += $5} END {print n + 0}' "$OUT/echo.stats")
	wait $spid
	src=$?
	wait $rpid
	rc=$?
	sed "s/^/    /" "$OUT/echo.srv" "$OUT/echo.recv" | grep -v ready
	grep -h "^Tx doorbells" "$OUT/echo.stats" | sed "s/^/    /"
	[ $src = 0 ] && [ $rc = 0 ] && echo_ok=1
	[ $echo_ok = 1 ] || echo "    server exit $src, receiver exit $rc"
}
echo_all_ok=1 echo_held_ok=0
for attempt in 1 2 3; do
	echo_round
	[ $echo_ok = 1 ] || echo_all_ok=0
	if [ -n "$held" ] && [ "$held" -ge 20 ] && [ "${bells:-0}" -gt 0 ]; then
		echo_held_ok=1
		break
	fi
done
if [ $echo_all_ok = 1 ]; then
	echo "PASS: echo of queued requests: $ECHO_N replies arrived once, in each of $attempt rounds"
else
	echo "FAIL: echo of queued requests: replies lost or the server failed"
	fail=1
fi
if [ $echo_held_ok = 1 ]; then
	echo "PASS: echo of queued requests: $held of $ECHO_N replies waited for the next ones, $bells doorbells (at least 20, round $attempt)"
else
	echo "FAIL: echo of queued requests: ${held:-no} of $ECHO_N replies waited for the next ones, ${bells:-no} doorbells (vma_stats; at least 20 in one of 3 rounds)"
	fail=1
fi
exit $fail

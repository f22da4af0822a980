#!/bin/bash
# ring_flows.sh [BUILD_DIR]: what the ring receives, flow by flow, and how it
# recovers. In its own two-namespace testbed (TB_PREFIX, default vmarf), with
# ring_echo on PREFIX-b0 (AF_XDP):
#  - two UDP flows on one ring: both ports echoed, the ring's count exact;
#  - a 5-tuple flow answers only its peer (address and port), not another
#    source port of the same host;
#  - a multicast group flow receives datagrams sent to the group from the
#    other namespace (route 224.0.0.0/4 there);
#  - after detach (exit) the kernel gets the port back: a kernel socket
#    then receives on it;
#  - an RX pool smaller than the traffic, its frames held: the ring drops
#    and counts, then once the frames are released traffic resumes;
#  - nothing is left attached or pinned.
# Exit 0 all passed, 1 a check failed, 77 cannot run here (not root, not built).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=${1:-${BUILD_DIR:-$PWD}}
BENCH=$BUILD/tests/bench
TESTBED=$TOP/contrib/testbed.sh
export TB_PREFIX=${TB_PREFIX:-vmarf}
P=$TB_PREFIX
PORT=${PORT:-7200}
TMP=$(mktemp -d /tmp/ring_flows.XXXXXX)
PASSED=0 FAILED=0

skip() { echo "ring_flows: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
for p in ring_echo udp_echo_kernel udp_pp_client; do
	[ -x "$BENCH/$p" ] || skip "$BENCH/$p not built (HAVE_XDP?)"
done
command -v python3 >/dev/null || skip "python3 missing"
"$TESTBED" up pair >/dev/null || skip "testbed setup failed"

check() { # check "what" command...
	if "${@:2}" >>"$TMP/log" 2>&1; then
		echo "ok   - $1"; PASSED=$((PASSED + 1))
	else
		echo "FAIL - $1"; FAILED=$((FAILED + 1))
	fi
}
in_a() { ip netns exec "$P-a" "$@"; }
NSB=(nsenter --net="/run/netns/$P-b")   # keeps the host's bpffs mount
in_b() { "${NSB[@]}" "$@"; }

PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	"$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

start_echo() { # start_echo TAG PORTS [VAR=VALUE...]: sets ECHO_PID
	local tag=$1 ports=$2
	shift 2
	env RING_ECHO_SLEEP=1 "$@" "${NSB[@]}" "$BENCH/ring_echo" "$P-b0" "$ports" >"$TMP/$tag.out" 2>"$TMP/$tag.err" &
	ECHO_PID=$!
	PIDS+=("$ECHO_PID")
	for _ in $(seq 50); do
		grep -q ready "$TMP/$tag.out" 2>/dev/null && return 0
		kill -0 "$ECHO_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
stop_echo() { kill -TERM "$ECHO_PID"; wait "$ECHO_PID"; }
pp() { in_a "$BENCH/udp_pp_client" 198.18.0.2 "$1" "$2" 64 0; }
pp_exact() { # pp_exact PORT COUNT ANSWERED
	local line
	line=$(pp "$1" "$2")
	echo "pp $1 x$2: $line"
	echo "$line" | grep -q "^rounds=$3 lost=$(($2 - $3))"
}
stat_of() { # stat_of FILE NAME: a number from ring_echo's exit line
	sed -n "s/.*ring_echo: rx .* $2 \([0-9]*\).*/\1/p" "$1" | head -1
}
rx_count() { sed -n 's/.*ring_echo: rx \([0-9]*\) .*/\1/p' "$1"; }
no_xdp() { ! in_b ip link show "$P-b0" | grep -q xdp; }
no_pins() { [ ! -d "/sys/fs/bpf/vma/$P-b0" ] || [ -z "$(ls -A "/sys/fs/bpf/vma/$P-b0")" ]; }
# The program is vmad's: it goes once vmad's linger (2 s) has passed.
gone_within() { # gone_within SECONDS TEST
	local i=0
	while [ $i -lt $(($1 * 10)) ]; do
		"$2" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

# udp_from SRC_PORT DST_IP DST_PORT COUNT: sends COUNT datagrams from
# 198.18.0.1:SRC_PORT, prints how many were answered (300 ms each).
UDP_FROM='
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.0.1", int(sys.argv[1]))); s.settimeout(0.3)
got = 0
for i in range(int(sys.argv[4])):
    s.sendto(b"flow%04d" % i + bytes(40), (sys.argv[2], int(sys.argv[3])))
    try:
        s.recv(2048); got += 1
    except socket.timeout:
        pass
print(got)'
udp_from() { in_a python3 -c "$UDP_FROM" "$@"; }
answered() { # answered EXPECTED SRC_PORT DST_IP DST_PORT COUNT
	local got
	got=$(udp_from "${@:2}")
	echo "from port $2 to $3:$4: $got of $5 answered, want $1"
	[ "$got" = "$1" ]
}

P1=$PORT P2=$((PORT + 1)) P5=$((PORT + 5)) PM=$((PORT + 6)) PX=$((PORT + 7))

echo "# two flows on one ring"
check "ring_echo with ports $P1,$P2 starts" start_echo two "$P1,$P2"
check "UDP $P1: 120 of 120 answered" pp_exact "$P1" 120 120
check "UDP $P2: 80 of 80 answered" pp_exact "$P2" 80 80
check "UDP $PX (not attached): nothing answered" pp_exact "$PX" 3 0
stop_echo
check "the ring received exactly 200 datagrams" test "$(rx_count "$TMP/two.err")" = 200

echo "# detach gives the port back to the kernel"
check "no XDP program left after exit (vmad's linger)" gone_within 5 no_xdp
"${NSB[@]}" "$BENCH/udp_echo_kernel" "$P1" >"$TMP/kernel.out" 2>&1 &
KPID=$!; PIDS+=("$KPID")
sleep 0.3
check "a kernel socket on $P1 now receives (50 of 50)" pp_exact "$P1" 50 50
kill -INT "$KPID"; wait "$KPID" 2>/dev/null

echo "# 5-tuple flow"
check "ring_echo with a 5-tuple flow (peer 198.18.0.1:40001) starts" \
	start_echo five "$P5" RING_ECHO_FLOW=5:198.18.0.2:198.18.0.1:40001
check "its peer gets 10 of 10 answers" answered 10 40001 198.18.0.2 "$P5" 10
check "another source port of the same host gets none" answered 0 40002 198.18.0.2 "$P5" 3
stop_echo
check "the ring received exactly the peer's 10" test "$(rx_count "$TMP/five.err")" = 10

echo "# multicast group flow"
in_a ip route replace 224.0.0.0/4 dev "$P-a0"
check "ring_echo with group 239.1.2.3 port $PM starts" start_echo group "$PM" RING_ECHO_GROUP=239.1.2.3
udp_from 40003 239.1.2.3 "$PM" 5 >>"$TMP/log" 2>&1
# Control: unicast to the same port is not the group's (the kernel has it).
udp_from 40004 198.18.0.2 "$PM" 3 >>"$TMP/log" 2>&1
stop_echo
check "the ring received exactly the 5 group datagrams, not the 3 unicast" \
	test "$(rx_count "$TMP/group.err")" = 5

echo "# RX pool exhaustion and recovery"
check "ring_echo with 64 RX frames, holding them, starts" \
	start_echo hold "$P1" RING_ECHO_RX_BUFS=64 RING_ECHO_HOLD=1
check "100 requests: exactly 64 answered, then the pool is empty" pp_exact "$P1" 100 64
check "ring_echo is still alive (drops, no block, no crash)" kill -0 "$ECHO_PID"
kill -USR1 "$ECHO_PID"
sleep 0.3
check "after releasing the frames: 100 of 100 answered" pp_exact "$P1" 100 100
stop_echo
cat "$TMP/hold.err" >>"$TMP/log"
check "it released 64 held frames" grep -q "released 64 held frames" "$TMP/hold.err"
check "the ring received exactly 164" test "$(rx_count "$TMP/hold.err")" = 164
check "the RX pool low-water mark reached 0" test "$(stat_of "$TMP/hold.err" free_min)" = 0
check "the RX pool counted the refused packets (empty > 0)" test "$(stat_of "$TMP/hold.err" empty)" -gt 0

echo "# leftovers"
check "no XDP program on $P-b0 (vmad's linger)" gone_within 5 no_xdp
check "no pin under /sys/fs/bpf/vma/$P-b0" gone_within 2 no_pins

if [ "$FAILED" -gt 0 ]; then
	echo "--- log"; cat "$TMP/log"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

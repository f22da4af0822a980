#!/bin/bash
# ring_steering.sh [BUILD_DIR]: the eBPF steering sends only attached flows to
# the ring. In the two-namespace testbed, with ring_echo on $TB_PREFIX-b0 UDP PORT:
#  - ring_echo answers on PORT and receives exactly the datagrams sent there;
#  - a kernel UDP server on PORT+1, ping, and kernel TCP on PORT and PORT+2
#    keep working;
#  - the program belongs to vmad (docs/vmad.md): ring_echo starts a private
#    vmad, whose pid names the pin;
#  - SIGTERM: exit 0, no echo at once; vmad removes the program and the pin
#    after its linger (2 s) and exits;
#  - a SIGKILLed ring_echo: vmad takes its port back, the next one gets it;
#  - a SIGKILLed vmad: its program stays; the next vmad removes it;
#  - without privileges and no vmad, ring_echo exits 3 with one warning
#    naming the interface and the reason.
# Exit 0 all passed, 1 a check failed, 77 cannot run here (not root, not built).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=${1:-${BUILD_DIR:-$PWD}}
BENCH=$BUILD/tests/bench
TESTBED=$TOP/contrib/testbed.sh
# Our own testbed namespaces: another run may be using the default ones.
export TB_PREFIX=${TB_PREFIX:-vmars}
P=$TB_PREFIX
PORT=${PORT:-7100}
TMP=$(mktemp -d /tmp/ring_steering.XXXXXX)
PASSED=0 FAILED=0

skip() { echo "ring_steering: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
for p in ring_echo udp_echo_kernel udp_pp_client; do
	[ -x "$BENCH/$p" ] || skip "$BENCH/$p not built (HAVE_XDP?)"
done
command -v python3 >/dev/null || skip "python3 missing (TCP checks)"
command -v ping >/dev/null || skip "ping missing (iputils-ping)"
"$TESTBED" up pair >/dev/null || skip "testbed setup failed"

check() { # check "what" command...
	if "${@:2}" >>"$TMP/log" 2>&1; then
		echo "ok   - $1"; PASSED=$((PASSED + 1))
	else
		echo "FAIL - $1"; FAILED=$((FAILED + 1))
	fi
}
in_a() { ip netns exec $P-a "$@"; }
# nsenter (not ip netns exec) keeps the host's bpffs mount. Background jobs
# use NSB directly so that $! is the program itself, not a subshell.
NSB=(nsenter --net=/run/netns/$P-b)
in_b() { "${NSB[@]}" "$@"; }

PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	"$TESTBED" down >/dev/null 2>&1
	[ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT

start_echo() { # start_echo TAG: ring_echo in sleep mode; sets ECHO_PID
	RING_ECHO_SLEEP=1 "${NSB[@]}" "$BENCH/ring_echo" $P-b0 "$PORT" >"$TMP/$1.out" 2>"$TMP/$1.err" &
	ECHO_PID=$!
	PIDS+=("$ECHO_PID")
	for _ in $(seq 50); do
		grep -q ready "$TMP/$1.out" 2>/dev/null && return 0
		kill -0 "$ECHO_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}
pp() { in_a "$BENCH/udp_pp_client" 198.18.0.2 "$1" "$2" 64 0; }
pp_ok() { pp "$1" "$2" | grep -q "rounds=$2 lost=0 "; }
pp_all_lost() { pp "$1" "$2" | grep -q "rounds=0 lost=$2"; }
xdp_attached() { in_b ip link show $P-b0 | grep -q 'xdp'; }
no_xdp() { ! xdp_attached; }
pin_of() { [ -e "/sys/fs/bpf/vma/$P-b0/$1" ]; }
# The private vmad of the namespace (the one whose pin is there).
vmad_pid() { ls "/sys/fs/bpf/vma/$P-b0" 2>/dev/null | head -1; }
is_vmad() { grep -q vmad "/proc/$1/cmdline" 2>/dev/null; }
# wait_for SECONDS command...: until command succeeds.
wait_for() {
	local limit=$(($1 * 10)) i=0
	shift
	while [ $i -lt $limit ]; do
		"$@" && return 0
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}
# pid has exited: gone, or a zombie its parent has not reaped yet (a vmad
# started --daemon is reparented to PID 1, which reaps when it gets to it).
exited() { ! kill -0 "$1" 2>/dev/null || [ "$(sed -n 's/^[0-9]* (.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
no_pins() { [ ! -d "/sys/fs/bpf/vma/$P-b0" ] || [ -z "$(ls -A "/sys/fs/bpf/vma/$P-b0")" ]; }
rx_count() { sed -n 's/.*ring_echo: rx \([0-9]*\) .*/\1/p' "$1"; }

TCP_SERVER='
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("198.18.0.2", int(sys.argv[1]))); s.listen(1); print("ready", flush=True)
c, _ = s.accept(); c.sendall(c.recv(100).upper()); c.close()'
TCP_CLIENT='
import socket, sys
c = socket.create_connection(("198.18.0.2", int(sys.argv[1])), timeout=3)
c.sendall(b"steer me"); sys.exit(0 if c.recv(100) == b"STEER ME" else 1)'
tcp_roundtrip() { # tcp_roundtrip PORT: kernel TCP server in b, client in a
	"${NSB[@]}" timeout 10 python3 -c "$TCP_SERVER" "$1" >"$TMP/tcp$1" 2>&1 &
	local srv=$!
	for _ in $(seq 30); do grep -q ready "$TMP/tcp$1" && break; sleep 0.1; done
	in_a timeout 5 python3 -c "$TCP_CLIENT" "$1"; local rc=$?
	wait "$srv"
	return $rc
}

echo "# ring_echo attached"
check "ring_echo starts and prints ready" start_echo first
check "XDP program attached to $P-b0" xdp_attached
VMAD=$(vmad_pid)
check "the pin /sys/fs/bpf/vma/$P-b0/PID names a running vmad ($VMAD)" is_vmad "$VMAD"
check "UDP $PORT answered by ring_echo (200 round trips, none lost)" pp_ok "$PORT" 200

"${NSB[@]}" "$BENCH/udp_echo_kernel" $((PORT + 1)) >"$TMP/kernel.out" 2>&1 &
KPID=$!; PIDS+=("$KPID")
sleep 0.3
check "kernel UDP server on $((PORT + 1)) still answers (100 round trips)" pp_ok $((PORT + 1)) 100
kill -INT "$KPID"; wait "$KPID"
check "ping 198.18.0.2 passes to the kernel" in_a ping -c 3 -i 0.2 -W 1 198.18.0.2
check "kernel TCP on port $PORT (same port, other protocol) works" tcp_roundtrip "$PORT"
check "kernel TCP on port $((PORT + 2)) works" tcp_roundtrip $((PORT + 2))

echo "# detach"
kill -TERM "$ECHO_PID"; wait "$ECHO_PID"; RC=$?
check "SIGTERM: ring_echo exits 0" test "$RC" = 0
check "ring_echo received exactly the 200 datagrams sent to its port" test "$(rx_count "$TMP/first.err")" = 200
check "UDP $PORT no longer answered (3 tries, all lost)" pp_all_lost "$PORT" 3
check "within 5 s vmad removed the XDP program from $P-b0" wait_for 5 no_xdp
check "and its pin" wait_for 2 no_pins
check "and exited" wait_for 5 exited "$VMAD"

echo "# a member killed"
check "second ring_echo starts" start_echo crashed
DEAD=$ECHO_PID
check "UDP $PORT answered" pp_ok "$PORT" 20
kill -KILL "$DEAD"; wait "$DEAD" 2>/dev/null
check "after its SIGKILL the port is free again: a third ring_echo gets it" start_echo third
check "UDP $PORT answered by the third" pp_ok "$PORT" 20

echo "# vmad killed"
VMAD=$(vmad_pid)
kill -KILL "$VMAD"
check "after vmad's SIGKILL the program stays attached" xdp_attached
check "and the pin of pid $VMAD stays" pin_of "$VMAD"
kill -TERM "$ECHO_PID"; wait "$ECHO_PID"
check "a fourth ring_echo starts (a new vmad)" start_echo fourth
check "the pin of the dead vmad $VMAD is gone" eval "! pin_of $VMAD"
check "UDP $PORT answered again" pp_ok "$PORT" 20
VMAD=$(vmad_pid)
kill -TERM "$ECHO_PID"; wait "$ECHO_PID"
check "after its exit no XDP program and no pin are left (linger)" wait_for 5 eval "no_xdp && no_pins"
check "its vmad ($VMAD) exited" wait_for 5 exited "$VMAD"

echo "# without privileges"
in_b setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all \
	"$BENCH/ring_echo" $P-b0 "$PORT" >"$TMP/unpriv.out" 2>"$TMP/unpriv.err"
RC=$?
cat "$TMP/unpriv.err" >>"$TMP/log"
check "unprivileged ring_echo exits 3 (kernel path kept)" test "$RC" = 3
check "its warning names $P-b0 and the missing privilege" \
	grep -q "WARN.*$P-b0.*privilege" "$TMP/unpriv.err"
check "exactly one warning line" test "$(grep -c WARN "$TMP/unpriv.err")" = 1
check "it never printed ready" eval "! grep -q ready $TMP/unpriv.out"
check "nothing left attached" no_xdp

if [ "$FAILED" -gt 0 ]; then
	echo "--- log"; cat "$TMP/log"
fi
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

#!/bin/bash
# A process that closes its TCP connection and exits at once must not reset
# a peer whose FIN from us was lost (root). The kernel keeps such a closed
# connection after its process exits; libvma cannot (its stack goes with the
# process), so at exit it waits until its FINs are acknowledged, a few RTOs
# at most (SOCK_TCP_EXIT_FIN_RTOS, SOCK_TCP_EXIT_FIN_MAX_MS), before it
# resets what is left. Exit used to give FINs 200 ms: a lost FIN is resent at
# once by the tail loss probe, but when that is lost too the next copy
# leaves at the RTO (200 ms at least), after the reset that ended a peer
# that had every byte with ECONNRESET.
#
# Testbed pair (prefix texit or $TEXIT_PREFIX): the kernel peer in -a
# (198.18.0.1), the test side in -b (198.18.0.2). The peer's namespace drops
# the first three FINs that reach it on the scenario's port (nft numgen):
# the FIN, its tail loss probe and its first RTO retransmission. Each
# scenario runs on the kernel first (the reference: it must pass, or the
# scenario proves nothing), then with the test side under libvma:
#   active  (port 9811): the test side connects, sends 200 KB, close()s and
#           exits; the peer must read 200 KB and then EOF.
#   passive (port 9812): the peer connects, sends 200 KB, shuts down its
#           write side and waits; the test side reads to EOF, close()s and
#           exits; the peer must then read EOF (not ECONNRESET), and a
#           new listener (SO_REUSEADDR) binds the port at once while that
#           connection still finishes, as after a kernel server's exit.
#   window  (port 9813, no drops): the peer (SO_RCVBUF 16 KiB) accepts and
#           reads nothing for 2 s; the test side sends without blocking
#           until EAGAIN, close()s and exits with its data unacknowledged
#           behind a closed window; the peer must then read every byte and
#           EOF. Under libvma this needs the kernel to take the connection
#           over at exit (TCP_REPAIR, root here): exit waits 200 ms, then
#           hands what is unacknowledged over instead of resetting it.
# Checks: the peer's outcome, that exactly three FINs were dropped (none in
# window), that the libvma process exits within 2 s (the cap is 1.5 s), and
# that the libvma run was offloaded (the kernel TCP segment counters of the
# test namespace barely grow; 200 KB on the kernel are about 140 segments
# out), in window that exit handed the connection over (its details log).
# Usage: tcp_exit_fin.sh [BUILDDIR | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
set -u
ARG=${1:-$(dirname "$0")/../..}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "$ARG" ]; then LIB=$ARG/src/vma/.libs/libvma.so; else LIB=$ARG; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: needs nft"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
LIB=$(readlink -f "$LIB")
export TB_PREFIX=${TEXIT_PREFIX:-texit}
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
TMP=$(mktemp -d)
peer=
cleanup() {
	[ -n "$peer" ] && kill "$peer" 2>/dev/null
	pkill -TERM -f "vmad --daemon --log $TMP/vmad.log" 2>/dev/null
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
PEER_ADDR=198.18.0.1 TEST_ADDR=198.18.0.2 BYTES=200000

# The first three FINs of the test side on each port are dropped; the rules are
# loaded again before each run (numgen and the counters restart).
rules() {
	$A nft delete table inet texit 2>/dev/null
	$A nft -f - <<-EOF
	table inet texit {
		chain pre {
			type filter hook prerouting priority -150; policy accept;
			ip saddr $TEST_ADDR tcp dport 9811 tcp flags & fin == fin numgen inc mod 1000000 0-2 counter drop
			ip saddr $TEST_ADDR tcp sport 9812 tcp flags & fin == fin numgen inc mod 1000000 0-2 counter drop
		}
	}
	EOF
}
# fin_drops PORT: FINs of the test side dropped by the rule of PORT (the
# other port's rule may still catch a late retransmission of the run before,
# whose kernel connection finishes after it: a kernel run once read 4).
fin_drops() { $A nft list table inet texit | grep -w "$1" | grep -o 'counter packets [0-9]*' | awk '{s += $3} END {print s + 0}'; }
# Segments the test namespace's kernel received and sent (InSegs + OutSegs).
tcp_segs() { $B awk '/^Tcp:/{n++; if (n == 2) print $11 + $12}' /proc/net/snmp; }

# Peer (kernel, namespace a). active: accept, read to EOF, print the bytes
# and how it ended. passive: connect, send, shut down writing, wait for EOF.
PEER_PY='
import socket, sys, time
mode, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
got, end = 0, "EOF"
def wait_eof(c):
    global got, end
    c.settimeout(10)
    try:
        while True:
            b = c.recv(65536)
            if not b:
                break
            got += len(b)
    except ConnectionResetError:
        end = "ECONNRESET"
    except socket.timeout:
        end = "timeout"
if mode in ("active", "window"):
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if mode == "window":
        l.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    l.bind((addr, port)); l.listen(1)
    print("ready", flush=True)
    c, _ = l.accept()
    if mode == "window":
        time.sleep(2)
    wait_eof(c)
else:
    c = socket.create_connection((addr, port), timeout=10)
    c.sendall(bytes(i % 251 for i in range(n)))
    c.shutdown(socket.SHUT_WR); wait_eof(c)
print("peer got", got, "end", end, flush=True)
'
# Test side (namespace b, kernel or libvma): close() and exit at once.
TEST_PY='
import socket, sys, time
mode, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "active":
    c = socket.create_connection((addr, port), timeout=10)
    c.sendall(bytes(i % 251 for i in range(n)))
    c.close()
elif mode == "window":
    c = socket.create_connection((addr, port), timeout=10)
    c.setblocking(False)
    sent, blocked, chunk = 0, 0, bytes(65536)
    while blocked < 5 and sent < (16 << 20):
        try:
            sent += c.send(chunk)
            blocked = 0
        except BlockingIOError:
            blocked += 1
            time.sleep(0.02)
    print("test sent", sent, flush=True)
    c.close()
else:
    l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind((addr, port)); l.listen(1)
    print("ready", flush=True)
    c, _ = l.accept(); got = 0
    while True:
        b = c.recv(65536)
        if not b:
            break
        got += len(b)
    print("test got", got, flush=True)
    c.close()
'

# A new listener on the port a closing connection still holds.
REBIND_PY='
import socket, sys
l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    l.bind((sys.argv[1], int(sys.argv[2]))); l.listen(1); print("rebind ok")
except OSError as e:
    print("rebind", e)
'

fail=0
check() { if [ "$1" = 1 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
wait_ready() { for _ in $(seq 100); do grep -qx ready "$1" && return 0; sleep 0.05; done; return 1; }

# scenario NAME MODE PORT RUN(kernel|libvma)
scenario() {
	local name=$1 mode=$2 port=$3 run=$4 pre="" t0 t1 trc in0 in1
	[ "$run" = libvma ] && pre="env LD_PRELOAD=$LIB"
	[ "$run" = libvma ] && [ "$name" = nocap ] && pre="setpriv --bounding-set=-net_admin $pre"
	# window: the handoff's log line (details) shows which way it went
	[ "$run" = libvma ] && [ "$mode" = window ] && pre="$pre VMA_TRACELEVEL=details"
	rules || { echo "SKIP: nft rules in the peer namespace"; exit 77; }
	local pout=$TMP/$name.$run.peer tout=$TMP/$name.$run.test
	in0=$(tcp_segs)
	if [ "$mode" != passive ]; then
		$A timeout 30 python3 -c "$PEER_PY" "$mode" $PEER_ADDR "$port" $BYTES >"$pout" 2>&1 &
		peer=$!
		wait_ready "$pout" || { check 0 "$name/$run: peer listening"; return; }
		t0=$(date +%s%N)
		$B $pre timeout 30 python3 -c "$TEST_PY" "$mode" $PEER_ADDR "$port" $BYTES >"$tout" 2>&1
		trc=$?
		t1=$(date +%s%N)
		wait $peer; peer=
	else
		$B $pre timeout 30 python3 -c "$TEST_PY" passive $TEST_ADDR "$port" $BYTES >"$tout" 2>&1 &
		local tpid=$!
		wait_ready "$tout" || { check 0 "$name/$run: test side listening"; kill $tpid; return; }
		$A timeout 30 python3 -c "$PEER_PY" passive $TEST_ADDR "$port" $BYTES >"$pout" 2>&1 &
		peer=$!
		# the test side's exit starts when it has read everything
		for _ in $(seq 200); do grep -q "test got" "$tout" && break; sleep 0.01; done
		t0=$(date +%s%N)
		wait $tpid; trc=$?
		t1=$(date +%s%N)
		# A restarted server binds its port again (SO_REUSEADDR) while
		# the closed connection still finishes (our last FIN is dropped)
		local rebind
		rebind=$($B python3 -c "$REBIND_PY" $TEST_ADDR "$port" 2>&1 | tail -1)
		wait $peer; peer=
	fi
	in1=$(tcp_segs)
	local outcome drops ms want=$BYTES want_drops=3
	[ "$mode" = passive ] && want=0   # the peer sent; the test side sends only its FIN
	[ "$mode" = window ] && want=$(awk '/^test sent/ {print $3}' "$tout") want_drops=0
	outcome=$(grep -o 'peer got .*' "$pout")
	drops=$(fin_drops "$port")
	ms=$(( (t1 - t0) / 1000000 ))
	check "$([ $trc = 0 ] && echo 1)" "$name/$run: test side exit 0 (got $trc) $(grep -vx ready "$tout" | grep -v "^VMA " | tail -2 | tr '\n' ' ')"
	check "$([ "$outcome" = "peer got $want end EOF" ] && echo 1)" \
		"$name/$run: the peer read $want bytes and EOF (${outcome:-no report: $(tail -2 "$pout" | tr '\n' ' ')})"
	check "$([ "$drops" = "$want_drops" ] && echo 1)" "$name/$run: the peer's namespace dropped $want_drops FINs of the test side (dropped $drops)"
	if [ "$mode" = passive ]; then
		check "$([ "$rebind" = "rebind ok" ] && echo 1)" \
			"$name/$run: a new listener binds the port (SO_REUSEADDR) while the connection finishes ($rebind)"
	fi
	if [ "$run" = libvma ]; then
		check "$([ $ms -lt 2000 ] && echo 1)" "$name/$run: the test side exited within 2 s of its close ($ms ms)"
		if [ "$mode" = window ]; then
			# the kernel sends what was left after the exit: no flat counters
			check "$(grep -q 'handed to the kernel' "$tout" && echo 1)" \
				"$name/$run: exit handed the unacknowledged connection to the kernel (log: $(grep -o 'exit: .*' "$tout" | head -1))"
		else
			check "$([ $((in1 - in0)) -lt 50 ] && echo 1)" "$name/$run: offloaded (kernel Tcp InSegs + OutSegs of the test namespace +$((in1 - in0)) < 50)"
		fi
	fi
}
for mode in ${TEXIT_MODES:-active passive window}; do
	port=9811
	[ $mode = passive ] && port=9812
	[ $mode = window ] && port=9813
	scenario $mode $mode $port kernel
	scenario $mode $mode $port libvma
done
# Without CAP_NET_ADMIN there is no TCP_REPAIR: exit waits for the FIN's
# retransmissions itself (5 RTOs, at most 1.5 s). Such a program is
# accelerated through a system vmad (docs/vmad.md), started here.
# Not on softverbs (the verbs pass): without CAP_NET_ADMIN it cannot add
# the nftables table that keeps the kernel from the frames its rules steer,
# so the kernel answers our connection with RSTs (a NIC steers in hardware).
VMAD=$(dirname "$LIB")/../../../tools/vmad/vmad
if [ "${VMA_RING_BACKEND:-}" = verbs ]; then
	echo "nocap: skipped on the verbs backend (softverbs needs CAP_NET_ADMIN)"
elif [ "${TEXIT_NOCAP:-1}" = 1 ] && [ -x "$VMAD" ]; then
	$B "$VMAD" --daemon --log "$TMP/vmad.log" || check 0 "nocap: a system vmad starts"
	scenario nocap active 9811 libvma
	pkill -TERM -f "vmad --daemon --log $TMP/vmad.log"
	for _ in $(seq 50); do pgrep -f "vmad --daemon --log $TMP/vmad.log" >/dev/null || break; sleep 0.1; done
elif [ "${TEXIT_NOCAP:-1}" = 1 ]; then
	echo "nocap: skipped (no vmad next to $LIB)"
fi
[ $fail = 0 ] && echo "tcp_exit_fin: all checks passed" || echo "tcp_exit_fin: FAILED"
exit $fail

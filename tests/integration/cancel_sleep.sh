#!/bin/bash
# pthread_cancel() of threads in offloaded calls (docs/architecture.md,
# "Thread cancellation"): the thread ends, as under Linux, and the process's
# sockets and lanes keep working for its other threads.
# Usage: tests/integration/cancel_sleep.sh BUILDDIR   exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/cancel_sleep runs under libvma in CXL-b (see its header
# for the phases), a kernel client in CXL-a:
#   idle   (default polling): threads cancelled in recv, recvfrom,
#          epoll_wait, poll, select, accept and a TCP recv, 60 rounds each;
#          then 20 datagrams and 20 TCP messages echoed intact.
#   flood  (default polling): the client floods the UDP port while threads
#          looping on recv, epoll_wait+recv and poll+recv are cancelled (a
#          call that finds data at once must still act on the cancellation,
#          and a cancelled thread must not leave a lane or a set locked).
#   sleep  the idle phase again with VMA_RX_POLL=0 VMA_SELECT_POLL=0: every
#          cancellation lands in a sleep.
#   watch  (VMA_RX_POLL=0): of two readers of one lane asleep in recvfrom,
#          the one watching the lane is cancelled; the other must answer 50
#          datagrams with a median round trip under 3 ms (a cancelled
#          watcher still counted left it waiting for the internal thread's
#          pass, about 10 ms each).
#   reap   (VMA_RX_POLL=0): 20 rounds of a UDP socket whose reader,
#          asleep in recv, is cancelled, then the socket closed; once the
#          graveyard let them go, the process has as many open fds as after
#          the first round (a pin the cancelled call kept would keep the
#          socket, and its eventfd, forever).
# Each phase: the server exits 0 (every cancelled thread ended within 3 s,
# the socket usable after), and the server namespace's kernel Udp
# InDatagrams grew by less than 5 in each phase but flood (offloaded).
set -u
BUILD=${1:?usage: cancel_sleep.sh BUILDDIR}
TB_PREFIX_OVERRIDE=${CXL_TB_PREFIX:-}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/cancel_sleep
PROG=$BUILD/tests/integration/cancel_sleep
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
pair_up vmacxl cancel_sleep
PORT=16500

# run PHASE ROUNDS CLIENT_SCRIPT [VAR=VALUE...]: the server in B, then the
# client in A once it printed "ready"; prints the client's output and
# sets SRV_RC.
run() {
	local phase=$1 rounds=$2 client=$3
	shift 3
	$B env LD_PRELOAD="$LIB" "$@" timeout 120 "$PROG" 198.18.0.2 $PORT "$rounds" "$phase" \
		>"$WORK/$phase.out" 2>"$WORK/$phase.err" &
	SRV=$!
	pair_wait_ready "$WORK/$phase.out" "$SRV" 600
	CLIENT_OUT=$($A timeout 100 python3 -c "$client" "$PORT" 2>&1)
	wait "$SRV"
	SRV_RC=$?
	SRV=""
	sed 's/^/  /' "$WORK/$phase.out"
	grep -v '^VMA INFO' "$WORK/$phase.err" | sed 's/^/  stderr: /' | head -5
	echo "  client: $CLIENT_OUT"
}

ECHO_CLIENT='
import socket,sys,time
port=int(sys.argv[1])
t=socket.create_connection(("198.18.0.2",port),timeout=5)
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(8)
time.sleep(0.3)
for i in range(20):
    m=b"u%05d"%i
    u.sendto(m,("198.18.0.2",port)); assert u.recv(64)==m, "udp echo %d" % i
t.settimeout(8)
for i in range(20):
    m=b"t%05d"%i
    t.sendall(m); assert t.recv(64)==m, "tcp echo %d" % i
print("echoes ok")
'
FLOOD_CLIENT='
import socket,sys,time
port=int(sys.argv[1])
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
end=time.time()+6
n=0
while time.time()<end:
    try:
        for i in range(100): u.sendto(b"x"*32,("198.18.0.2",port))
        n+=100
    except OSError: pass
    time.sleep(0.001)
print("sent %d" % n)
' 
WATCH_CLIENT='
import socket,sys,time
port=int(sys.argv[1])+1
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.settimeout(5)
rtts=[]
for i in range(50):
    m=b"w%05d"%i
    t0=time.monotonic()
    u.sendto(m,("198.18.0.2",port))
    assert u.recv(64)==m, "echo %d" % i
    rtts.append((time.monotonic()-t0)*1000)
    time.sleep(0.005)
rtts.sort()
print("median_ms %.2f max_ms %.2f" % (rtts[25], rtts[-1]))
'

udp_before() { UDP0=$(snmp Udp: 2); }
udp_flat() { local d=$(($(snmp Udp: 2) - UDP0)); check $([ $d -lt 5 ] && echo 0 || echo 1) "$1: offloaded (kernel Udp InDatagrams +$d)"; }

echo "== idle (default polling)"
udp_before
run idle 60 "$ECHO_CLIENT"
check $SRV_RC "idle: every cancelled thread ended, the sockets work after (exit $SRV_RC)"
check $([ "$CLIENT_OUT" = "echoes ok" ] && echo 0 || echo 1) "idle: 20 datagrams and 20 messages echoed intact"
udp_flat idle

echo "== flood (default polling)"
run flood 60 "$FLOOD_CLIENT"
check $SRV_RC "flood: every cancelled thread ended, the sockets work after (exit $SRV_RC)"

echo "== sleep (VMA_RX_POLL=0 VMA_SELECT_POLL=0)"
udp_before
run idle 60 "$ECHO_CLIENT" VMA_RX_POLL=0 VMA_SELECT_POLL=0
check $SRV_RC "sleep: every cancelled thread ended, the sockets work after (exit $SRV_RC)"
check $([ "$CLIENT_OUT" = "echoes ok" ] && echo 0 || echo 1) "sleep: 20 datagrams and 20 messages echoed intact"
udp_flat sleep

echo "== watch (VMA_RX_POLL=0)"
udp_before
run watch 1 "$WATCH_CLIENT" VMA_RX_POLL=0
check $SRV_RC "watch: the cancelled reader ended, the other served 50 datagrams (exit $SRV_RC)"
median=$(sed -n 's/^median_ms \([0-9.]*\) .*/\1/p' <<<"$CLIENT_OUT")
check $(python3 -c "import sys; print(0 if sys.argv[1] and float(sys.argv[1]) < 3 else 1)" "${median:-}") \
	"watch: the remaining reader answers at once (median ${median:-none} ms, bound 3)"
udp_flat watch

echo "== reap (VMA_RX_POLL=0)"
run reap 20 'print("no client")' VMA_RX_POLL=0
check $SRV_RC "reap: the sockets of cancelled readers are destroyed once closed (exit $SRV_RC)"

[ $fail = 0 ] && echo "cancel_sleep: all checks passed"
exit $fail

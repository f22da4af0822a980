#!/bin/bash
# RX frame accounting across traffic and process end (root).
# Usage: ring_shutdown.sh [build dir | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# A receiver under libvma takes a 1 s sockperf throughput burst and then ends
# by SIGINT (VMA_HANDLE_SIGINTR=1), SIGTERM (VMA_HANDLE_SIGINTR=1), SIGTERM
# (default handling) or a normal exit. For each: the burst went through the
# ring (the namespace's Udp InDatagrams stays flat), and stderr has no
# "fill ring full" / "frames lost" (a frame handed back the kernel's fill
# ring when it looked full was dropped), no "freed twice" / "delivered twice"
# (frame accounting guard) and no VMA ERROR at all.
set -u
LIB=${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}
[ -d "$LIB" ] && LIB=$LIB/src/vma/.libs/libvma.so
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v sockperf >/dev/null || { echo "SKIP: needs sockperf"; exit 77; }
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
LIB=$(readlink -f "$LIB")
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_PREFIX=vmashut
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
LOG=$(mktemp)
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1; rm -f "$LOG"' EXIT
A="nsenter --net=/run/netns/vmashut-a"
B="nsenter --net=/run/netns/vmashut-b"
$A ethtool -K vmashut-a0 tx off >/dev/null 2>&1
$B ethtool -K vmashut-b0 tx off >/dev/null 2>&1
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }

# Normal exit: receives until 4 s of silence, then returns from main.
QUIET_RX='
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.bind(("198.18.0.2",11111)); s.settimeout(4); n=0
try:
  while True: s.recv(2048); n+=1
except socket.timeout: pass
print("received", n)
'

# $1 label, $2 signal or "exit", $3 VMA_HANDLE_SIGINTR
run_case() {
	local before after pid
	before=$(udp_in)
	if [ "$2" = exit ]; then
		$B env LD_PRELOAD="$LIB" VMA_HANDLE_SIGINTR="$3" python3 -c "$QUIET_RX" >"$LOG" 2>&1 & pid=$!
	else
		$B env LD_PRELOAD="$LIB" VMA_HANDLE_SIGINTR="$3" sockperf sr -i 198.18.0.2 -p 11111 >"$LOG" 2>&1 & pid=$!
	fi
	sleep 1.5
	$A sockperf tp -i 198.18.0.2 -p 11111 -m 64 -t 1 >/dev/null 2>&1
	[ "$2" = exit ] || kill -"$2" "$pid"
	wait "$pid"
	after=$(udp_in)
	# sockperf's start/stop messages are a few datagrams at most.
	[ $((after - before)) -le 10 ]; check $? "$1: burst taken by the ring (kernel Udp InDatagrams delta $((after - before)))"
	if [ "$2" = exit ]; then
		grep -Eq '^received [1-9][0-9]{3,}' "$LOG"; check $? "$1: receiver got the burst ($(grep -o 'received [0-9]*' "$LOG"))"
	fi
	! grep -Eq 'fill ring full|frames lost' "$LOG"; check $? "$1: no 'fill ring full' / 'frames lost'"
	! grep -Eq 'freed twice|delivered twice' "$LOG"; check $? "$1: no RX frame returned twice"
	! grep -q 'VMA ERROR' "$LOG"; check $? "$1: no VMA ERROR"
	[ $fail = 0 ] || sed 's/^/    /' "$LOG" | grep -v '^    *$' | head -20
}

run_case "SIGINT, VMA_HANDLE_SIGINTR=1" INT 1
run_case "SIGTERM, VMA_HANDLE_SIGINTR=1" TERM 1
run_case "SIGTERM, default handling" TERM 0
run_case "normal exit" exit 0
exit $fail

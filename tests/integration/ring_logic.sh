#!/bin/bash
# SO_VMA_RING_ALLOC_LOGIC (docs/process_model.md, "Threads: lanes"): a
# socket with a ring allocation logic of its own gets the lane that logic
# gives it, in a process left at VMA_RING_ALLOCATION_LOGIC_RX=0.
# Usage: ring_logic.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/ring_logic (libvma) in RLG-b: UDP sockets u0 (no
# option), u1 (logic 10), u2 and u3 (logic 11, user id 7), u4 (logic 11,
# user id 8, set after bind: a steered socket moves) and a TCP listener
# with logic 10; the option's errors (EINVAL, EFAULT) checked inside. A
# kernel client in RLG-a sends 200 numbered datagrams to each UDP socket
# and 100 requests over one TCP connection: every echo intact; the server
# namespace's kernel Udp InDatagrams and Tcp InSegs flat; vma_stats -v 2:
# u0 in lane 0, u1 in a lane of its own, u2 and u3 in one lane, u4 in
# another, the accepted connection in the listener's lane (a fifth), none
# of them lane 0 but u0.
set -u
BUILD=${1:?usage: ring_logic.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/ring_logic
PROG=$BUILD/tests/integration/ring_logic
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
pair_need "$VMA_STATS"
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${RLG_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM
pair_up rlg ring_logic

PORT=16100
udp0=$(snmp Udp: 2) tcp0=$(snmp Tcp: 11)
$B env LD_PRELOAD="$LIB" VMA_TRACELEVEL=warn "$PROG" $PORT >"$WORK/out" 2>"$WORK/err" &
SRV=$!
pair_wait_ready "$WORK/out" "$SRV"
read -r _ pid fd0 fd1 fd2 fd3 fd4 lfd < <(grep '^ready' "$WORK/out")
[ -n "${lfd:-}" ]; check $? "server ready with its sockets' options set (errors checked: EINVAL, EFAULT)$(
	[ -n "${lfd:-}" ] || { echo; sed 's/^/  | /' "$WORK/err"; })"
[ -n "${lfd:-}" ] || exit 1

# The client keeps its TCP connection open until $WORK/release exists, so
# vma_stats sees the accepted connection.
$A timeout 60 python3 - $PORT "$WORK/release" <<'PY' >"$WORK/client" 2>&1 &
import socket, sys
port = int(sys.argv[1]); bad = 0
for i in range(5):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.0)
    for k in range(200):
        d = b"u%d-%05d-" % (i, k) + bytes((k * 7 + j) & 0xff for j in range(k % 300))
        s.sendto(d, ("198.18.0.2", port + i))
        try:
            r, a = s.recvfrom(2048)
            if r != d: bad += 1
        except socket.timeout:
            bad += 1
    print("udp %d: %d bad" % (i, bad))
t = socket.create_connection(("198.18.0.2", port + 10), timeout=5)
for k in range(100):
    d = b"t-%05d-" % k + bytes((k + j) & 0xff for j in range(56))
    t.sendall(d); r = b""
    while len(r) < len(d):
        c = t.recv(len(d) - len(r))
        if not c: break
        r += c
    if r != d: bad += 1
print("tcp: total %d bad" % bad, flush=True)
import os, time
for _ in range(200):
    if os.path.exists(sys.argv[2]): break
    time.sleep(0.05)
sys.exit(1 if bad else 0)
PY
CLI=$!
for _ in $(seq 300); do grep -q '^tcp:' "$WORK/client" && break; kill -0 $CLI 2>/dev/null || break; sleep 0.1; done
conn=$(awk '/^accepted/ {print $2; exit}' "$WORK/out")
"$VMA_STATS" -p "$pid" -v 2 -c 1 >"$WORK/stats" 2>&1
touch "$WORK/release"
wait $CLI
check $? "5 UDP sockets x 200 datagrams and 100 TCP requests echoed intact ($(tail -1 "$WORK/client"))"
lane_of() {
	awk -v fd="Fd=[$1]" '
		$NF == fd || $1 == fd {on = 1; next}
		on && /^- Ring migrations/ {l = $7; gsub(/[^0-9]/, "", l); print l; exit}' "$WORK/stats"
}
l0=$(lane_of "$fd0") l1=$(lane_of "$fd1") l2=$(lane_of "$fd2") l3=$(lane_of "$fd3") l4=$(lane_of "$fd4")
lc=$(lane_of "${conn:--1}")
echo "lanes: u0 $l0, u1 $l1, u2 $l2, u3 $l3, u4 $l4, TCP connection (fd ${conn:-none}) $lc"
[ "$l0" = 0 ]; check $? "u0 (no option) in lane 0 (got '$l0')"
[ -n "$l1" ] && [ "$l1" != 0 ]; check $? "u1 (logic 10) in a lane of its own (got '$l1')"
[ -n "$l2" ] && [ "$l2" = "$l3" ] && [ "$l2" != 0 ] && [ "$l2" != "$l1" ]
check $? "u2 and u3 (logic 11, user id 7) share one lane (got '$l2', '$l3')"
[ -n "$l4" ] && [ "$l4" != 0 ] && [ "$l4" != "$l1" ] && [ "$l4" != "$l2" ]
check $? "u4 (logic 11, user id 8, set after bind) moved to another lane (got '$l4')"
[ -n "$lc" ] && [ "$lc" != 0 ] && [ "$lc" != "$l1" ] && [ "$lc" != "$l2" ] && [ "$lc" != "$l4" ]
check $? "the TCP connection lives in a lane of its own (got '$lc')"
ll=$(lane_of "$lfd")
[ "$ll" = "$lc" ]; check $? "the TCP listener (logic 10) is in its connection's lane (got '$ll')"
$A python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"quit", ("198.18.0.2", '$PORT'))'
wait "$SRV"; rc=$?; SRV=""
[ $rc = 0 ]; check $? "server exits 0 (exit $rc)"
dudp=$(( $(snmp Udp: 2) - udp0 )) dtcp=$(( $(snmp Tcp: 11) - tcp0 ))
# The quit datagram and nothing else may reach the kernel.
[ $dudp -le 1 ] && [ $dtcp -le 5 ]
check $? "server namespace kernel counters flat: Udp InDatagrams +$dudp, Tcp InSegs +$dtcp"
[ $fail = 0 ] || { echo "--- vma_stats"; sed 's/^/  | /' "$WORK/stats" | head -80; echo "--- server stderr"; sed 's/^/  | /' "$WORK/err"; }
[ $fail = 0 ] && echo "ring_logic: all checks passed"
exit $fail

#!/bin/bash
# A UDP socket made by one thread and read by another moves to the reader's
# lane (VMA_RING_MIGRATION_RATIO_RX, docs/process_model.md "Threads: lanes")
# without losing a datagram (root).
# Usage: udp_migrate.sh [build dir | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Testbed TB_PREFIX=$MIG_TB_PREFIX (default vmamig). VMA_TEST_PRELOAD (e.g.
# the ASan runtime) goes before the library in LD_PRELOAD.
#
# tests/integration/udp_migrate runs under libvma in PREFIX-b: its main
# thread makes and binds the socket, a second thread does every receive and
# echo. A kernel client in PREFIX-a sends N numbered datagrams of 32..232
# bytes: a burst of 300 before the reader starts (queued in the main
# thread's lane), the rest paced while the reader starts, so the move comes
# with datagrams queued and others in flight. Each case checks:
#   - the reader saw every number 0..N-1 once, each intact; the client got
#     every echo back intact (loss 0)
#   - vma_stats: the socket's "Ring migrations" (and its lane) as expected,
#     its Rx/Tx Offload packets = every datagram, Rx OS packets 0
#   - the server namespace's Udp InDatagrams did not grow: everything went
#     through the rings, before, during and after the move
# Cases:
#   a. logic 20, ratio 10, blocking recvfrom: moves (1); a second round with
#      a new reader thread 1.5 s later moves it again (2)
#   b. logic 20, ratio 10, epoll_wait + non-blocking recvfrom: moves (1)
#   c. logic 20, ratio -1: never moves, still all echoed and offloaded
#   d. logic 31 (per core, migrating), ratio 10, threads pinned to CPUs 0
#      and 1, epoll: moves (1)
#   e. logic 30 (per core, no migration), the same pinning: never moves
#   f. as a, one round, a burst of 400, VMA_PROGRESS_ENGINE_INTERVAL=0 (the
#      internal thread does not drain rings: the burst waits in the main
#      thread's ring) and VMA_CQ_POLL_BATCH_MAX=1 (the move drains at most
#      256 frames, 256 passes of 1): the rest of the backlog reaches the old
#      lane's pcb after the move, and the reader, the only thread that polls,
#      must fetch it from the old lane and get it handed over (strays, counted
#      from the debug log; there must be some)
#   g. logic 20, ratio 10, blocking recvfrom, while the main thread forks
#      20 children (exiting at once) during the reader's start and the move:
#      no loss, no hang, one move, every child exits 0 (the kernel socket
#      carries what arrives between a fork and the next read, so there the
#      kernel counter is only printed and Rx Offload + Rx OS packets = N)
# MIG_CASES="a f" runs only those; KEEP=1 keeps the logs (their directory
# is printed).
set -u
LIB=${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}
BUILD=""
if [ -d "$LIB" ]; then BUILD=$(readlink -f "$LIB"); LIB=$LIB/src/vma/.libs/libvma.so; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
LIB=$(readlink -f "$LIB")
[ -n "$BUILD" ] || BUILD=$(readlink -f "$(dirname "$LIB")/../../..")
HELPER=$BUILD/tests/integration/udp_migrate
[ -x "$HELPER" ] || make -C "$BUILD" -s tests/integration/udp_migrate >/dev/null 2>&1
[ -x "$HELPER" ] || { echo "SKIP: no $HELPER (make check builds it)"; exit 77; }
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
[ -x "$VMA_STATS" ] || { echo "SKIP: no $VMA_STATS"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
export TB_PREFIX=${MIG_TB_PREFIX:-vmamig}
WORK=$(mktemp -d /tmp/udp_migrate.XXXXXX)
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; rm -rf "$WORK"; exit 77; }
cleanup() {
	for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	[ -n "${KEEP:-}" ] && echo "kept $WORK" || rm -rf "$WORK"
}
trap cleanup EXIT
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
N=3000
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }

# The kernel client: N datagrams to 198.18.0.2:PORT (the first 300 at once,
# then 2 per ms), every echo checked; prints "sent N echoed E bad B".
CLIENT='
import socket,sys,threading,time
port,n,burst=int(sys.argv[1]),int(sys.argv[2]),int(sys.argv[3])
def payload(k):
    size=32+(k%5)*50
    return b"%08u:"%k+bytes(((k*31+i)&0xff) for i in range(9,size))
data=[payload(k) for k in range(n)]
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET,33,8<<20)   # SO_RCVBUFFORCE
s.settimeout(0.2)
echoed=set(); bad=[0]; done=[False]
def rx():
    last=time.time()
    while len(echoed)<n and time.time()-last<6:
        try: d=s.recv(4096)
        except socket.timeout:
            if done[0]: pass
            continue
        last=time.time()
        try: k=int(d[:8])
        except ValueError: bad[0]+=1; continue
        if k<n and d==data[k]: echoed.add(k)
        else: bad[0]+=1
t=threading.Thread(target=rx); t.start()
for k in range(n):
    s.sendto(data[k],("198.18.0.2",port))
    if k>=burst and k%2==1: time.sleep(0.001)
done[0]=True
t.join()
print("sent %d echoed %d bad %d"%(n,len(echoed),bad[0]))
'

# stats FD FILE: "MIGRATIONS LANE RX_PACKETS TX_PACKETS RX_OS_PACKETS" of
# socket FD from a vma_stats -v 2 dump.
stats_of() {
	awk -v fd="Fd=[$1]" '
		$1 == fd {on = 1; next}
		on && /^=+$/ {on = 0}
		on && /^- Ring migrations/ {m = $5; l = $7; gsub(/[^0-9]/, "", m); gsub(/[^0-9]/, "", l)}
		on && /^Rx Offload:/ {rx = $5}
		on && /^Tx Offload:/ {tx = $5}
		on && /^Rx OS info:/ {os = $6}
		END {print (m == "" ? "-" : m), (l == "" ? "-" : l), rx + 0, tx + 0, os + 0}' "$2"
}

# run_case LABEL LOGIC RATIO MODE PIN(pin|-) ROUNDS MIGRATIONS_AFTER_EACH_ROUND... LANE_AFTER
run_case() {
	local label=$1 logic=$2 ratio=$3 mode=$4 pinarg=$5 rounds=$6
	shift 6
	local want_mig=("$@") port=$((15000 + RANDOM % 5000)) burst=${BURST:-300}
	local want_lane=${want_mig[$rounds]}
	[ "$pinarg" = - ] && pinarg=
	echo "== $label: VMA_RING_ALLOCATION_LOGIC_RX=$logic VMA_RING_MIGRATION_RATIO_RX=$ratio, $mode${pinarg:+, $pinarg}${EXTRA_ENV:+, $EXTRA_ENV}, burst $burst"
	mkfifo "$WORK/$label.in" "$WORK/$label.out"
	$B env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_TRACELEVEL=debug ${EXTRA_ENV:-} \
		VMA_RING_ALLOCATION_LOGIC_RX="$logic" VMA_RING_MIGRATION_RATIO_RX="$ratio" \
		"$HELPER" "$port" "$mode" ${pinarg:+"$pinarg"} \
		<"$WORK/$label.in" >"$WORK/$label.out" 2>"$WORK/$label.err" &
	local srv=$! in out line="" pid fd
	exec {in}>"$WORK/$label.in" {out}<"$WORK/$label.out"
	read -r -t 20 line <&"$out"
	if [ "${line%% *}" != ready ]; then
		echo "FAIL: $label: server did not start ($line)"; sed 's/^/  srv: /' "$WORK/$label.err" | tail -20
		fail=1; exec {in}>&- {out}<&-; kill -9 $srv 2>/dev/null; wait $srv 2>/dev/null; return
	fi
	read -r _ pid fd <<<"$line"
	local r total=0
	for r in $(seq 1 "$rounds"); do
		[ "$r" -gt 1 ] && sleep 1.5   # a move needs the last one's grace (1 s) over
		local before after reply="" got
		before=$(udp_in)
		$A timeout 40 python3 -c "$CLIENT" "$port" "$N" "$burst" >"$WORK/$label.cli$r" 2>&1 &
		local cli=$!
		sleep 0.3   # the burst and the first paced datagrams queue up unread
		echo "go $N forks ${FORKS:-0}" >&"$in"
		read -r -t 40 reply <&"$out"
		wait $cli
		got=$(cat "$WORK/$label.cli$r")
		after=$(udp_in)
		total=$((total + N))
		[ "${reply% recv_calls *}" = "done got $N dup 0 bad 0" ] && [ "${reply##* forks_ok }" = "${FORKS:-0}" ]
		check $? "$label round $r: the reader saw all $N datagrams once, intact ($reply)"
		[ "$got" = "sent $N echoed $N bad 0" ]
		check $? "$label round $r: the client got every echo back intact ($got)"
		if [ -z "${FORKS:-}" ]; then
			[ $((after - before)) -le 0 ]
			check $? "$label round $r: server Udp InDatagrams delta $((after - before)) (all offloaded)"
		else
			# At each fork the parent stops steering the port until its
			# next read (docs/process_model.md): some datagrams take the
			# kernel socket, which the reader reads too.
			echo "  server Udp InDatagrams delta $((after - before)) (forks: the kernel socket serves between a fork and the next read)"
		fi
		$VMA_STATS -p "$pid" -v 2 -c 1 >"$WORK/$label.vs$r" 2>&1
		local m l rx tx os
		read -r m l rx tx os <<<"$(stats_of "$fd" "$WORK/$label.vs$r")"
		[ "$m" = "${want_mig[$((r - 1))]}" ]
		check $? "$label round $r: vma_stats fd $fd: ring migrations $m (want ${want_mig[$((r - 1))]}), lane $l"
		if [ -z "${FORKS:-}" ]; then
			[ "$rx" = "$total" ] && [ "$tx" = "$total" ] && [ "$os" = 0 ]
			check $? "$label round $r: vma_stats fd $fd: Rx/Tx Offload packets $rx/$tx (want $total), Rx OS packets $os"
		else
			[ $((rx + os)) = "$total" ]
			check $? "$label round $r: vma_stats fd $fd: Rx Offload $rx + Rx OS $os packets = $total"
		fi
	done
	[ "$l" = "$want_lane" ]; check $? "$label: the socket ends in lane $l (want $want_lane)"
	grep -E "moved from lane|stays in lane|carry" "$WORK/$label.err" | sed 's/^.*fd /  log: fd /'
	local strays
	strays=$(sed -nE 's/.* ([0-9]+) datagrams the lane it left still received handed over.*/\1/p' "$WORK/$label.err" |
		awk '{s += $1} END {print s + 0}')
	echo "  log: $strays datagrams reached the old lane after a move and were handed over (strays)"
	if [ -n "${WANT_STRAYS:-}" ]; then
		[ "$strays" -gt 0 ]
		check $? "$label: the old lane's backlog beyond the move's drain reached the socket as strays ($strays)"
	fi
	echo quit >&"$in"
	exec {in}>&- {out}<&-
	wait $srv; local st=$?
	[ $st = 0 ]; check $? "$label: server exit status $st"
	local bad_log="runtime error|AddressSanitizer|LeakSanitizer|Segmentation|VMA (WARNING|ERROR|PANIC)"
	# (The banner's warning that VMA_TRACELEVEL=debug is slow is expected.)
	if grep -E "$bad_log" "$WORK/$label.err" | grep -qvE 'VMA WARNING: \*'; then
		echo "FAIL: $label: the server's log has warnings or errors:"
		grep -E "$bad_log" "$WORK/$label.err" | grep -vE 'VMA WARNING: \*' | head -20
		fail=1
	fi
}

cases="a b c d e f g"
for c in ${MIG_CASES:-$cases}; do
	case $c in
	a) run_case a 20 10 recv - 2 1 2 2 ;;
	b) run_case b 20 10 epoll - 1 1 1 ;;
	c) run_case c 20 -1 recv - 1 0 0 ;;
	g) FORKS=20 run_case g 20 10 recv - 1 1 1 ;;
	f) BURST=400 EXTRA_ENV="VMA_CQ_POLL_BATCH_MAX=1 VMA_PROGRESS_ENGINE_INTERVAL=0" WANT_STRAYS=1 \
		run_case f 20 10 recv - 1 1 1 ;;
	d | e)
		if [ "$(nproc)" -lt 2 ]; then
			echo "SKIP (case $c): one CPU, no two cores to pin threads to"
		elif [ $c = d ]; then
			run_case d 31 10 epoll pin 1 1 1
		else
			run_case e 30 10 recv pin 1 0 0
		fi
		;;
	esac
done
exit $fail

#!/bin/bash
# Wait channels (docs/process_model.md, "Wait channels"): under the default
# ring logic a connection's packets wake the thread that waits for it.
# Usage: tests/integration/wait_chan.sh BUILDDIR   exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/wait_chan runs under libvma in WCH-b: its main thread
# accepts two connections and hands them to two threads, "quiet" and
# "busy", each with an epoll set of its own. A kernel client in WCH-a
# sends a message on the quiet connection, then 3 s of 64-byte round trips
# on the busy one, then a second message on the quiet one.
#   channels  (default): every message echoed intact; the quiet thread
#             slept through the busy connection's traffic: fewer than 10
#             voluntary context switches between its two echoes (each
#             sleep in epoll_wait is one); the server namespace's kernel
#             Tcp InSegs grew by less than 100 (offloaded).
#   no channels (VMA_RING_WAIT_CHANNELS=0), for the record and as the
#             test's own check: the quiet thread, sleeping on the lane's
#             ring, woke at least 3 times as often as with channels.
#   channels, vma_stats: the same with a 1 s pause after the busy round
#             trips, during which vma_stats -v 3 reads the server: the
#             interface's ring counts what the channels received (Rx
#             Offload packets at least 90% of the busy round trips, each
#             one request segment; the tool may read a refresh late).
set -u
BUILD=${1:?usage: wait_chan.sh BUILDDIR}
TB_PREFIX_OVERRIDE=${WCH_TB_PREFIX:-}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/wait_chan
PROG=$BUILD/tests/integration/wait_chan
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
pair_up vmawch wait_chan
PORT=16600
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
pair_need "$VMA_STATS"

CLIENT='
import socket,sys,time
port=int(sys.argv[1])
q=socket.create_connection(("198.18.0.2",port),timeout=5)
time.sleep(0.2)
b=socket.create_connection(("198.18.0.2",port),timeout=5)
q.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1); b.setsockopt(socket.IPPROTO_TCP,socket.TCP_NODELAY,1)
def echo(s,m):
    s.sendall(m); got=b""
    while len(got)<len(m):
        c=s.recv(len(m)-len(got))
        assert c, "closed"
        got+=c
    assert got==m, "bytes differ"
echo(q,b"quiet-1")
time.sleep(0.3)
n=0; end=time.time()+3
while time.time()<end:
    echo(b,b"%064d"%n); n+=1
open(sys.argv[2],"w").write("%d\n"%n)
time.sleep(float(sys.argv[3]))
echo(q,b"quiet-2")
q.close(); b.close()
print("ok rounds %d" % n)
'

# run [VAR=VALUE...]: sets OUT (the server's output), CLI and RC.
run() {
	PORT=$((PORT + 1))
	local seg0
	seg0=$(snmp Tcp: 11)
	$B env LD_PRELOAD="$LIB" "$@" timeout 60 "$PROG" 198.18.0.2 $PORT >"$WORK/srv.out" 2>"$WORK/srv.err" &
	SRV=$!
	pair_wait_ready "$WORK/srv.out" "$SRV"
	rm -f "$WORK/busy_done" "$WORK/stats"
	$A timeout 40 python3 -c "$CLIENT" "$PORT" "$WORK/busy_done" "${PAUSE:-0.3}" >"$WORK/cli.out" 2>&1 &
	local cli=$! pid
	# The client's pause after the busy round trips: the server's rings
	# as vma_stats shows them.
	for _ in $(seq 200); do [ -s "$WORK/busy_done" ] && break; sleep 0.05; done
	pid=$(pgrep -n -f "$PROG 198.18.0.2 $PORT\$")
	[ -n "${READ_STATS:-}" ] && [ -n "$pid" ] && [ -s "$WORK/busy_done" ] && "$VMA_STATS" -p "$pid" -v 3 -c 1 >"$WORK/stats" 2>&1
	wait $cli
	CLI=$(cat "$WORK/cli.out")
	wait "$SRV"
	RC=$?
	SRV=""
	SEGS=$(($(snmp Tcp: 11) - seg0))
	OUT=$(cat "$WORK/srv.out")
	sed 's/^/  /' "$WORK/srv.out"
	grep -v '^VMA INFO' "$WORK/srv.err" | sed 's/^/  stderr: /' | head -5
	echo "  client: $CLI (kernel Tcp InSegs +$SEGS)"
}
value() { sed -n "s/^$1 \([0-9-]*\)$/\1/p" <<<"$OUT"; }

echo "== channels (default)"
run
check $([ $RC = 0 ] && [[ $CLI == ok* ]] && echo 0 || echo 1) "channels: every message echoed intact (server exit $RC)"
rounds=$(sed -n 's/^ok rounds \([0-9]*\)$/\1/p' <<<"$CLI")
check $([ -n "$rounds" ] && [ "$(value busy_echoes)" = "$rounds" ] && [ "$(value quiet_echoes)" = 2 ] && echo 0 || echo 1) \
	"channels: the busy thread echoed all ${rounds:-?} round trips, the quiet one its 2 messages"
with=$(value quiet_wakeups)
check $([ -n "$with" ] && [ "$with" -ge 0 ] && [ "$with" -lt 10 ] && echo 0 || echo 1) \
	"channels: the quiet thread slept through the busy connection's traffic (${with:-?} wake-ups, bound 10)"
check $([ $SEGS -lt 100 ] && echo 0 || echo 1) "channels: offloaded (kernel Tcp InSegs +$SEGS)"

echo "== no channels (VMA_RING_WAIT_CHANNELS=0)"
run VMA_RING_WAIT_CHANNELS=0
without=$(value quiet_wakeups)
check $([ $RC = 0 ] && [[ $CLI == ok* ]] && echo 0 || echo 1) "no channels: every message echoed intact (server exit $RC)"
check $([ -n "$with" ] && [ -n "$without" ] && [ "$without" -ge $((3 * with + 3)) ] && echo 0 || echo 1) \
	"no channels: the quiet thread woke more (${without:-?} against ${with:-?}): the check above can fail"

echo "== channels, vma_stats -v 3 during a 1 s pause after the busy round trips"
PAUSE=1.0 READ_STATS=1 run
rounds=$(sed -n 's/^ok rounds \([0-9]*\)$/\1/p' <<<"$CLI")
# Every RING block's Rx Offload packets: the lane's ring (and any other).
ring_rx=$(awk '/^RING=/{on=1} on && /^Rx Offload:/{n += $5; on = 0} END{print n + 0}' "$WORK/stats" 2>/dev/null)
check $([ -n "$rounds" ] && [ "${ring_rx:-0}" -ge $((rounds * 9 / 10)) ] && echo 0 || echo 1) \
	"channels: vma_stats counts the channels' packets in the ring (Rx Offload ${ring_rx:-?} packets, busy round trips ${rounds:-?})"
[ "${ring_rx:-0}" -ge $((${rounds:-10} * 9 / 10)) ] || sed 's/^/  | /' "$WORK/stats" | head -40

[ $fail = 0 ] && echo "wait_chan: all checks passed"
exit $fail

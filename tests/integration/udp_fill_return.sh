#!/bin/bash
# Frames given back after the fill ring ran dry are taken again.
# Usage: tests/integration/udp_fill_return.sh BUILDDIR   exit 0 pass, 1 fail, 77 skip.
#
# A libvma receiver in FIL-b with a ring of 256 receive frames (VMA_RX_BUFS)
# and the internal thread off lets 40 UDP sockets go unread while a kernel
# sender in FIL-a floods them (10 datagrams each): their queues end up
# holding every frame (the frame share lets each hold 8 at least), the
# kernel finds the fill ring empty and drops the rest, as a NIC with no
# posted buffer does. The receiver then reads 3 datagrams, which puts their
# frames back, and waits on another socket, B; only then does the sender
# send B 40 datagrams 50 ms apart: the first must arrive, with no new drop
# at the veth. Then the receiver reads everything queued (all 256 frames
# back) and one more datagram to one of the 40 ports must arrive. Run with
# the receive polling (VMA_RX_POLL=-1) and sleeping (VMA_RX_POLL=0, the
# frames go back before the sleep: ring wait_arm). AF_XDP only (its fill
# ring; a verbs RQ has its own geometry, tests/unit/test_ring_verbs.c).
# (A reproduction of a "starved fill ring" kept outside the suite before
# 2026-11-30 was its own mistake: it waited for a line "read" and took
# "ready" for it, so B's datagrams came while the fill ring was rightly
# empty.)
set -u
BUILD=${1:?usage: udp_fill_return.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${FIL_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM   # SRV: the receiver
pair_up vmafil udp_fill_return

cat >"$WORK/recv.py" <<'PY'
import socket, struct, sys, time
base, n, bport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    s.bind(("198.18.0.2", port))
    return s
def wait(s, seconds):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))
    try:
        return s.recv(100).decode()
    except OSError:
        return "timeout"
socks = [udp(base + i) for i in range(n)]
b = udp(bport)
print("ready", flush=True)
# Waits on B (nothing comes) while the flood fills the 40 queues.
print("flood-wait", wait(b, 3), flush=True)
read = [socks[0].recv(100, socket.MSG_DONTWAIT).decode() for _ in range(3)]
print("read", " ".join(read), flush=True)
print("b", wait(b, 4), flush=True)
held = len(read)
for s in socks:
    while True:
        try:
            s.recv(100, socket.MSG_DONTWAIT)
            held += 1
        except BlockingIOError:
            break
print("held", held, flush=True)
print("after", wait(socks[5], 4), flush=True)
PY
cat >"$WORK/send.py" <<'PY'
import socket, sys, time
what = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if what == "flood":
    base, n, each = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for i in range(n):
        for k in range(each):
            s.sendto(b"f%03d-%02d" % (i, k), ("198.18.0.2", base + i))
        time.sleep(0.005)
else:
    for k in range(40):
        s.sendto(b"%s%03d" % (what.encode(), k), ("198.18.0.2", int(sys.argv[2])))
        time.sleep(0.05)
PY

BASE=16800 N=40 BPORT=16900
veth_drops() { $B ethtool -S "$TB_PREFIX-b0" | awk '$1 == "rx_queue_0_drops:" {print $2}'; }
# run_case NAME RX_POLL
run_case() {
	local out="$WORK/$1.out"
	: >"$out"
	$B env LD_PRELOAD="$LIB" VMA_RING_BACKEND=xdp VMA_RX_BUFS=256 VMA_PROGRESS_ENGINE_INTERVAL=0 VMA_RX_POLL=$2 \
		python3 "$WORK/recv.py" $BASE $N $BPORT >"$out" 2>"$WORK/$1.err" &
	SRV=$!
	# wait_line WORD SECONDS: a line that is WORD and its value ("ready"
	# is not "read").
	wait_line() {
		for _ in $(seq $(($2 * 10))); do grep -qE "^$1( |$)" "$out" && return 0; sleep 0.1; done
		return 1
	}
	if ! wait_line ready 10; then
		echo "FAIL: [$1] the receiver did not start"; sed 's/^/   /' "$WORK/$1.err"; fail=1; return
	fi
	$A python3 "$WORK/send.py" flood $BASE $N 10
	wait_line read 10
	check $? "[$1] the receiver read 3 of the flood's datagrams"
	local before after
	before=$(veth_drops)
	$A python3 "$WORK/send.py" b $BPORT &
	local snd=$!
	wait_line b 10
	after=$(veth_drops)
	wait_line held 10
	sleep 0.2
	$A python3 "$WORK/send.py" a $((BASE + 5))
	wait $snd 2>/dev/null
	wait "$SRV" 2>/dev/null
	SRV=""
	sed 's/^/   /' "$out"
	local held
	held=$(sed -n 's/^held //p' "$out")
	[ "${held:-0}" -ge 256 ]
	check $? "[$1] the 40 sockets held every receive frame (${held:-?} of 256): the fill ring ran dry"
	[ "${before:-0}" -gt 0 ]
	check $? "[$1] the veth dropped the flood's rest for want of a frame (${before:-?} drops)"
	grep -qx "b b000" "$out"
	check $? "[$1] B's first datagram arrived: the 3 frames read went back to the kernel"
	[ "${before:-x}" = "${after:-y}" ]
	check $? "[$1] no drop at the veth while B's datagram came (${before:-?} then ${after:-?})"
	grep -qx "after a000" "$out"
	check $? "[$1] after every frame came back, a datagram to a flooded port arrived"
	grep -E 'WARNING|ERROR' "$WORK/$1.err" | head -3 | sed 's/^/   /'
}
run_case poll -1
run_case sleep 0
exit $fail

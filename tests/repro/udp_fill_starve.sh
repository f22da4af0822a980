#!/bin/bash
# REPRODUCTION of an open problem, not a test (run.sh does not run it; it
# fails today). docs/ring.md, "Open: a fill ring that ran dry".
# Usage: tests/repro/udp_fill_starve.sh BUILDDIR    exit 0 pass, 1 fail, 77 skip.
#
# A libvma receiver in FIL-b with a ring of 256 receive frames, the internal
# thread off (VMA_PROGRESS_ENGINE_INTERVAL=0) and receives that poll for
# ever (VMA_RX_POLL=-1; VMA_RX_POLL=0 fails the same way). A kernel sender
# in FIL-a floods 40 unread UDP sockets (FIL_EACH=10 datagrams each) while
# the receiver polls another socket, B: the sockets' queues end up holding
# every receive frame (the frame share lets each hold 8 at least), so the
# kernel's fill ring runs dry and it drops the rest. The receiver then
# reads FIL_READS (3) datagrams, which puts their frames back in the fill
# ring, and waits on B for 4 s while the sender sends B 40 datagrams 50 ms
# apart. Expected: they arrive. Seen on 6.18 (veth, native XDP, copy
# mode), on c9849ba as on later builds: none arrives, or the first after
# about 2 s; the veth counts each as an XDP drop, the xdp:xdp_redirect_err
# tracepoint says -ENOMEM for the member's XSK map entry, yet our fill ring
# keeps the frames we gave back (its consumer index does not move) and
# the socket's own drop counters do not grow. FIL_AFTER=1 then reads every
# queued datagram (all 256 frames back) and sends to one of the 40 ports:
# nothing arrives either. With fewer datagrams (FIL_EACH=5, the fill ring
# never empty) B's datagrams arrive (all but the first).
set -u
BUILD=${1:?usage: udp_fill_starve.sh BUILDDIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BUILD=$(cd "$BUILD" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
[ -e "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TESTBED=$(cd "$(dirname "$0")/../../contrib" && pwd)/testbed.sh
export TB_PREFIX=${FIL_TB_PREFIX:-vmafil}
WORK=$(mktemp -d /tmp/udp_fill_starve.XXXXXX)
RCV=""
cleanup() {
	[ -n "$RCV" ] && kill "$RCV" 2>/dev/null && wait "$RCV" 2>/dev/null
	bash "$TESTBED" down >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
bash "$TESTBED" up pair >/dev/null || { echo "SKIP: testbed up pair failed"; exit 77; }
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

cat >"$WORK/recv.py" <<'PY'
import socket, struct, sys
base, n, bport = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def udp(port, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind(("198.18.0.2", port))
    return s
socks = [udp(base + i, 1 << 20) for i in range(n)]
b = udp(bport)
def wait_b(seconds):
    b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", seconds, 0))
    try:
        return b.recv(100)
    except OSError:
        return None
print("ready", flush=True)
# Polls the ring (B gets nothing) while the flood fills the 40 queues.
first = wait_b(3)
print("flood-wait", "got" if first else "timeout", flush=True)
read = [socks[i // 10].recv(100, socket.MSG_DONTWAIT) for i in range(int(sys.argv[4]))]
print("read", len(read), flush=True)
got = wait_b(4)
print("b", got.decode() if got else "timeout", flush=True)
held = len(read)
for s in socks:
    while True:
        try:
            s.recv(100, socket.MSG_DONTWAIT)
            held += 1
        except BlockingIOError:
            break
print("held", held, flush=True)
if len(sys.argv) > 5:
    b = socks[5]
    got = wait_b(4)
    print("after", got.decode() if got else "timeout", flush=True)
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
    port = int(sys.argv[2])
    for k in range(40):
        s.sendto(b"b%03d" % k, ("198.18.0.2", port))
        time.sleep(0.05)
PY

BASE=16800 N=${FIL_N:-40} BPORT=16900
$B env LD_PRELOAD="$LIB" VMA_RX_BUFS=256 VMA_PROGRESS_ENGINE_INTERVAL=0 VMA_RX_POLL=-1 ${FIL_ENV:-} \
	python3 "$WORK/recv.py" $BASE $N $BPORT ${FIL_READS:-3} ${FIL_AFTER:-} >"$WORK/recv.out" 2>"$WORK/recv.err" &
RCV=$!
wait_line() { # wait_line WORD SECONDS
	for _ in $(seq $(($2 * 10))); do grep -q "^$1" "$WORK/recv.out" && return 0; sleep 0.1; done
	return 1
}
wait_line ready 10 || { echo "FAIL: the receiver did not start"; cat "$WORK/recv.err"; exit 1; }
$A python3 "$WORK/send.py" flood $BASE $N ${FIL_EACH:-10}
wait_line read 10
check $? "the receiver read 3 of the flood's datagrams"
xdp_counts() { $B ethtool -S "$TB_PREFIX-b0" | awk '/xdp_redirect|_drops/ {printf "%s %s ", $1, $2}'; echo; }
echo "   veth before B: $(xdp_counts)"
$A python3 "$WORK/send.py" b $BPORT &
SND=$!
wait $SND
echo "   veth after B:  $(xdp_counts)"
wait_line held 15
[ -n "${FIL_AFTER:-}" ] && { sleep 0.2; $A python3 "$WORK/send.py" b $((BASE + 5)); sleep 1; }
wait $SND 2>/dev/null
wait "$RCV" 2>/dev/null
RCV=""
sed 's/^/   /' "$WORK/recv.out"
held=$(sed -n 's/^held //p' "$WORK/recv.out")
[ "${held:-0}" -ge 256 ]
check $? "the 40 sockets held every receive frame (${held:-?} of 256): the kernel's fill ring was empty"
grep -q "^b b0" "$WORK/recv.out"
check $? "a datagram to B arrived while the receive polled: the 3 freed frames went back to the kernel"
grep -E 'WARNING|ERROR' "$WORK/recv.err" | head -3 | sed 's/^/   /'
exit $fail

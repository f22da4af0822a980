#!/bin/bash
# The VMA Extra API (docs/extra_api.md) against a kernel peer.
# Usage: extra_api.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/extra_api runs in EXA-b under libvma with a ring of 512
# receive frames (VMA_RX_BUFS/VMA_RX_WRE); a kernel UDP service in EXA-a
# sends it datagrams on request. It gets the API table and checks each
# member that works with bytes and counts: the receive callback (sees every
# datagram in the reading thread, its DROP/RECV/HOLD decisions hold),
# recvfrom_zcopy + free_packets (3000 datagrams through 512 frames: none
# leaks), add_conf_rule (a later socket on the rule's port is served by the
# kernel: the namespace's kernel InDatagrams grow), thread_offload (a
# thread's new socket is a kernel one), ring fds, the network header,
# memory registration, dump_fd_stats, and the -1/EOPNOTSUPP of the rest.
# Without LD_PRELOAD the same program's vma_get_api() is NULL.
set -u
BUILD=${1:?usage: extra_api.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/extra_api
PROG=$BUILD/tests/integration/extra_api
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${EXTRA_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM   # SRV: the kernel peer
pair_up vmaexa extra_api

cat >"$WORK/peer.py" <<'PY'
import socket, struct, time
ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
ctl.bind(("198.18.0.1", 17000))
out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print("ready", flush=True)
while True:
    msg, (host, _) = ctl.recvfrom(100)
    n, port, size = (int(x) for x in msg.split())
    for i in range(n):
        body = struct.pack("!I", i) + bytes((i + k) & 0xff for k in range(4, size))
        out.sendto(body[:size], (host, port))
        if i % 50 == 49:
            time.sleep(0.004)
PY
: >"$WORK/peer.out"
$A python3 "$WORK/peer.py" >"$WORK/peer.out" 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q ready "$WORK/peer.out" && break; sleep 0.05; done
PEER_MAC=$($A ip link show "$TB_PREFIX-a0" | awk '/link\/ether/ {print $2}')

# The peer's MAC is learnt by the kernel of EXA-b first (the ring sends
# only to resolved neighbours).
$B ping -c 1 -W 1 198.18.0.1 >/dev/null 2>&1

$B env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_TRACELEVEL=warn VMA_RX_BUFS=512 VMA_RX_WRE=256 \
	timeout 120 "$PROG" 198.18.0.1 17000 18100 "$PEER_MAC" >"$WORK/run.out" 2>"$WORK/run.err"
rc=$?
cat "$WORK/run.out"
[ $rc = 0 ] || { echo "FAIL: extra_api exited $rc"; sed 's/^/  | /' "$WORK/run.err" | tail -30; fail=1; }
grep -q '^PASS: without libvma' <("$PROG" noapi) && echo "PASS: without LD_PRELOAD vma_get_api() is NULL" ||
	{ echo "FAIL: vma_get_api() without libvma"; fail=1; }

[ $fail = 0 ] && echo "extra_api: all checks passed"
exit $fail

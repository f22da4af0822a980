#!/bin/bash
# steer_full.sh [BUILD_DIR]: a full flow steering map on the xdp backend.
# The eBPF program's 5-tuple and 3-tuple maps hold RING_XDP_MAX_FLOWS
# entries per interface, every process's flows counted; a flow that finds
# them full gets no entry (E2BIG from the map), and the socket falls back
# (a connect() to the kernel). In its own testbed (TB_PREFIX, default
# vmasf), a Python client under libvma in PREFIX-b:
#  - connects once to a kernel echo server in PREFIX-a (offloaded: this
#    loads the program and its maps), then waits;
#  - the script fills both maps to the last entry with bpftool;
#  - the client connects 12 more times and echoes 64 KiB on each (the
#    first ones use ports reserved before the fill, the later ones find
#    no room and go through the kernel).
# Checks: every echo intact, some connections made by the server
# namespace's kernel (Tcp ActiveOpens), and exactly one warning that names
# the full steering (before 2026-12-02 there was none).
# Exit 0 all passed, 1 a check failed, 77 cannot run here.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:-${BUILD_DIR:-$PWD}}" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
TESTBED=$TOP/contrib/testbed.sh
export TB_PREFIX=${TB_PREFIX:-vmasf}
P=$TB_PREFIX
PORT=7310
TMP=$(mktemp -d /tmp/steer_full.XXXXXX)
PASSED=0 FAILED=0

skip() { echo "steer_full: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
[ -f "$LIB" ] || skip "$LIB not built"
command -v python3 >/dev/null || skip "python3 missing"
command -v bpftool >/dev/null || skip "bpftool missing"
[ "${VMA_RING_BACKEND:-xdp}" = xdp ] || skip "the maps are the xdp backend's"
"$TESTBED" up pair >/dev/null || skip "testbed setup failed"
A="nsenter --net=/run/netns/$P-a" B="nsenter --net=/run/netns/$P-b"
cleanup() {
	[ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null
	[ -n "${CLI:-}" ] && kill "$CLI" 2>/dev/null
	wait 2>/dev/null
	"$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

pass() { echo "PASS: $1"; PASSED=$((PASSED + 1)); }
failed() { echo "FAIL: $1"; FAILED=$((FAILED + 1)); }

# The kernel echo server (a thread per connection).
$A python3 -c '
import socket, threading
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("198.18.0.1", '$PORT')); ls.listen(64)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d: break
        c.sendall(d)
    c.close()
while True:
    c, _ = ls.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
' &
SRV=$!

mkfifo "$TMP/go"
# The client: one connection, "ready", waits for a line on the fifo, then
# 12 more; each echoes 64 KiB of a pattern its own.
$B env LD_PRELOAD="$LIB" python3 -c '
import socket, sys, time
def echo(i):
    for attempt in range(50):
        try:
            s = socket.create_connection(("198.18.0.1", '$PORT'), timeout=5)
            break
        except ConnectionRefusedError:
            time.sleep(0.1)
    data = bytes((i * 7 + k) & 0xff for k in range(65536))
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        d = s.recv(65536)
        if not d: break
        got += d
    if got != data:
        print("bad echo on connection", i, len(got), flush=True); sys.exit(1)
    return s
keep = [echo(0)]
print("ready", flush=True)
open(sys.argv[1]).readline()
keep += [echo(i) for i in range(1, 13)]
print("echoed", len(keep), flush=True)
' "$TMP/go" >"$TMP/cli.out" 2>"$TMP/cli.err" &
CLI=$!
for _ in $(seq 100); do grep -q '^ready' "$TMP/cli.out" && break; sleep 0.1; done
grep -q '^ready' "$TMP/cli.out" || { cat "$TMP/cli.err"; echo "FAIL: the first connection"; exit 1; }

# The maps of the program on the client's interface.
prog=$($B ip -d link show dev "$P-b0" | grep -o 'prog/xdp id [0-9]*' | awk '{print $3}' | head -1)
[ -n "$prog" ] || { echo "FAIL: no XDP program on $P-b0 (the first connection was not offloaded)"; exit 1; }
map5= map3=
for m in $(bpftool prog show id "$prog" | grep -o 'map_ids [0-9,]*' | awk '{print $2}' | tr ',' ' '); do
	name=$(bpftool map show id "$m" | head -1)
	case $name in *vma_flows5*) map5=$m ;; *vma_flows3*) map3=$m ;; esac
done
[ -n "$map5" ] && [ -n "$map3" ] || { echo "FAIL: the program's flow maps not found"; exit 1; }
max5=$(bpftool map show id "$map5" | grep -o 'max_entries [0-9]*' | awk '{print $2}')
max3=$(bpftool map show id "$map3" | grep -o 'max_entries [0-9]*' | awk '{print $2}')
# Keys nobody uses (local address 198.19.x.y); entries already there
# leave the last updates failing, so bpftool runs per batch of 512 and
# its errors are ignored: the map is full either way.
python3 - "$map5" "$max5" "$map3" "$max3" "$TMP" <<'EOF'
import sys
m5, n5, m3, n3, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]
def hx(b): return " ".join("%02x" % x for x in b)
lines = []
for i in range(n5):
    key = bytes([198, 19, i >> 8, i & 0xff, 198, 19, 0, 1, i >> 8, i & 0xff, 0, 80, 6, 0, 0, 0])
    lines.append("map update id %s key hex %s value hex 00 00 00 00" % (m5, hx(key)))
for i in range(n3):
    key = bytes([198, 19, i >> 8, i & 0xff, i >> 8, i & 0xff, 6, 0])
    lines.append("map update id %s key hex %s value hex 00 00 00 00" % (m3, hx(key)))
for k in range(0, len(lines), 512):
    open("%s/batch.%05d" % (tmp, k), "w").write("\n".join(lines[k:k + 512]) + "\n")
EOF
for f in "$TMP"/batch.*; do bpftool batch file "$f" >/dev/null 2>&1; done
count() { bpftool map dump id "$1" | grep -cE '^key|"key"'; }
c5=$(count "$map5") c3=$(count "$map3")
[ "$c5" -ge "$max5" ] && [ "$c3" -ge "$max3" ] && pass "maps filled (flows5 $c5/$max5, flows3 $c3/$max3)" ||
	failed "maps filled (flows5 $c5/$max5, flows3 $c3/$max3)"

opens0=$($B awk '/^Tcp:/{n++; if (n == 2) print $6}' /proc/net/snmp)
echo go >"$TMP/go"
wait "$CLI"
rc=$?
CLI=
opens=$(($($B awk '/^Tcp:/{n++; if (n == 2) print $6}' /proc/net/snmp) - opens0))
[ "$rc" = 0 ] && grep -q '^echoed 13' "$TMP/cli.out" && pass "13 connections echoed 64 KiB intact" ||
	failed "13 connections echoed 64 KiB intact (rc $rc: $(tr '\n' ' ' <"$TMP/cli.out"))"
[ "$opens" -ge 1 ] && [ "$opens" -le 12 ] && pass "the connections without room went through the kernel ($opens kernel active opens)" ||
	failed "the connections without room went through the kernel ($opens kernel active opens, 1 to 12 expected)"
warns=$(grep -c "flow steering is full" "$TMP/cli.err")
[ "$warns" = 1 ] && pass "one warning names the full steering: $(grep -m1 'flow steering is full' "$TMP/cli.err" | cut -c1-100)..." ||
	failed "one warning names the full steering ($warns found)"

echo "steer_full: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

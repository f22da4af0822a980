#!/bin/bash
# many_flows.sh [BUILD_DIR]: more connections than the steering used to hold.
# Until 2026-12-02 the eBPF program's 5-tuple and 3-tuple maps held 4096
# entries per interface (and vmad's flow table 4096 for every interface):
# a client with more connections than that sent the rest through the
# kernel, with one warning. They now hold RING_XDP_MAX_FLOWS (65536) each.
# In its own testbed (TB_PREFIX, default vmamf), a kernel echo server in
# PREFIX-a (198.18.0.1) and a Python client under libvma in PREFIX-b that
# opens MANY_FLOWS (6000) connections, echoes 16 bytes of its own on each,
# and keeps them all open until every one is done:
#  1. the client as root (it writes its flows into the maps itself);
#  2. the client as nobody, through a vmad in PREFIX-b (every flow goes
#     through vmad's table).
# Checks, each run: every echo intact, no connection made by the client
# namespace's kernel (Tcp ActiveOpens flat: all offloaded), no warning of a
# full steering map or flow table. Then the root client is killed with
# SIGKILL, and vmad must have the server's end of every connection reset
# within 15 s: they ride reserved ports' 3-tuples, which name no peer, and
# until 2026-12-02 nobody told those peers (vmad reads the process's peers
# list now, vmad_peers.h). nobody's client exits normally: the server sees
# every connection close.
#  3. a pre-fork server under libvma in PREFIX-b (2 workers; as root, then
#     as nobody through vmad) and a kernel client in PREFIX-a with
#     MANY_FLOWS connections echoing; one worker is killed with SIGKILL.
#     vmad must have the client's end of every connection of the dead
#     worker reset, before the client sends anything more: 5 s later the
#     client's established connections are exactly those that still echo
#     (until 2026-12-02 vmad probed a dead member's first 64 connections,
#     and the other peers learned only when they next sent).
#  4. the same with a one-process server (its connections ride its
#     listener's 3-tuple: only the peers list names them), killed: 5 s
#     later no connection is established at the client.
# Exit 0 all passed, 1 a check failed, 77 cannot run here.
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:-${BUILD_DIR:-$PWD}}" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
VMAD=$BUILD/tools/vmad/vmad
TESTBED=$TOP/contrib/testbed.sh
export TB_PREFIX=${TB_PREFIX:-vmamf}
P=$TB_PREFIX
PORT=7320
N=${MANY_FLOWS:-6000}
TMP=$(mktemp -d /tmp/many_flows.XXXXXX)
chmod 755 "$TMP"
PASSED=0 FAILED=0

skip() { echo "many_flows: SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root"
[ -f "$LIB" ] || skip "$LIB not built"
[ -x "$VMAD" ] || skip "$VMAD not built"
command -v python3 >/dev/null || skip "python3 missing"
command -v setpriv >/dev/null || skip "setpriv missing"
[ "${VMA_RING_BACKEND:-xdp}" = xdp ] || skip "the maps are the xdp backend's"
# A descriptor per connection in each of the two processes (a container
# may not let root raise the hard limit).
ulimit -n "$(ulimit -Hn)" 2>/dev/null
[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $((N + 512)) ] ||
	skip "the descriptor limit ($(ulimit -n)) is below $((N + 512))"
"$TESTBED" up pair >/dev/null || skip "testbed setup failed"
A="nsenter --net=/run/netns/$P-a" B="nsenter --net=/run/netns/$P-b"
NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all"
cleanup() {
	[ -n "${SRV:-}" ] && kill "$SRV" 2>/dev/null
	[ -n "${VMAD_PID:-}" ] && kill -9 "$VMAD_PID" 2>/dev/null
	wait 2>/dev/null
	"$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT

pass() { echo "PASS: $1"; PASSED=$((PASSED + 1)); }
failed() { echo "FAIL: $1"; FAILED=$((FAILED + 1)); }
# wait_ready OUT PID: until echo_client.py (PID) printed "ready" in OUT, or
# died, or 120 s went by.
wait_ready() {
	for _ in $(seq 1200); do
		grep -q "^ready" "$1" && return
		kill -0 "$2" 2>/dev/null || return
		sleep 0.1
	done
}
established() { $A ss -Htn state established "( sport = :$PORT )" | wc -l; }
passive_opens() { $B awk '/^Tcp:/{n++; if (n == 2) print $7}' /proc/net/snmp; }
active_opens() { $B awk '/^Tcp:/{n++; if (n == 2) print $6}' /proc/net/snmp; }

# The kernel echo server: one thread, every connection in one selector.
$A python3 -c '
import selectors, socket
sel = selectors.DefaultSelector()
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("198.18.0.1", '$PORT')); ls.listen(4096); ls.setblocking(False)
sel.register(ls, selectors.EVENT_READ)
while True:
    for key, _ in sel.select():
        s = key.fileobj
        if s is ls:
            c, _ = ls.accept(); c.setblocking(False)
            sel.register(c, selectors.EVENT_READ)
            continue
        try:
            d = s.recv(4096)
        except OSError:
            d = b""
        if d:
            s.send(d)
        else:
            sel.unregister(s); s.close()
' &
SRV=$!
for _ in $(seq 50); do $A ss -ltn | grep -q ":$PORT " && break; sleep 0.1; done

# echo_client.py HOST PORT N MODE: N connections, each echoing 16 bytes
# that name it, all kept open; prints "ready N". MODE hold: then waits for
# the end of its input. MODE recheck: after a line of input, echoes once
# more on each (3 s each at most) and prints "echoing" and how many did.
cat >"$TMP/echo_client.py" <<'EOF'
import socket, sys
host, port, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
def echo(s, i):
    msg = b"conn%011d\n" % i
    s.sendall(msg)
    got = b""
    while len(got) < len(msg):
        d = s.recv(64)
        if not d:
            break
        got += d
    return got == msg
keep = []
for i in range(n):
    s = socket.create_connection((host, port), timeout=10)
    if not echo(s, i):
        print("bad echo on connection %d" % i, flush=True)
        sys.exit(1)
    keep.append(s)
print("ready", len(keep), flush=True)
if mode == "hold":
    sys.stdin.read()
    sys.exit(0)
sys.stdin.readline()
ok = 0
for i, s in enumerate(keep):
    try:
        s.settimeout(3)
        ok += echo(s, i)
    except OSError:
        pass
print("echoing", ok, flush=True)
EOF

# client TAG [PREFIX...]: MANY_FLOWS connections under libvma (echo_client.py
# hold) to the kernel echo server.
client() {
	local tag=$1
	shift
	local opens0 opens1
	opens0=$(active_opens)
	mkfifo "$TMP/$tag.in"
	$B "$@" env LD_PRELOAD="$LIB" python3 "$TMP/echo_client.py" 198.18.0.1 $PORT "$N" hold \
		>"$TMP/$tag.out" 2>"$TMP/$tag.err" <"$TMP/$tag.in" &
	local cli=$!
	exec 3>"$TMP/$tag.in"
	wait_ready "$TMP/$tag.out" $cli
	opens1=$(active_opens)
	if grep -q "^ready $N\$" "$TMP/$tag.out"; then
		pass "$tag: $N connections, every echo intact"
	else
		failed "$tag: $N connections echoed ($(head -c 300 "$TMP/$tag.out" "$TMP/$tag.err" | tr '\n' ' '))"
	fi
	if [ $((opens1 - opens0)) = 0 ]; then
		pass "$tag: all offloaded (the client namespace's kernel Tcp ActiveOpens +0)"
	else
		failed "$tag: $((opens1 - opens0)) of $N connections went through the kernel"
	fi
	if grep -q "flow steering is full" "$TMP/$tag.err"; then
		failed "$tag: a full steering warning: $(grep -m1 "flow steering is full" "$TMP/$tag.err")"
	else
		pass "$tag: no full steering warning"
	fi
	local open0 open=-1 t how=exited
	open0=$(established)
	if [ "$tag" = root ]; then
		how="was killed with SIGKILL"
		kill -9 $cli
	fi
	exec 3>&-
	wait $cli 2>/dev/null
	for t in $(seq 150); do
		open=$(established)
		[ "$open" = 0 ] && break
		sleep 0.1
	done
	if [ "$open" = 0 ]; then
		pass "$tag: the client $how with $open0 connections open: the server saw every one end (in $((t / 10)).$((t % 10)) s)"
	else
		failed "$tag: the client $how with $open0 connections open; $open still established at the server 15 s later"
	fi
}

echo "== 1. root"
client root

echo "== 2. nobody, through vmad"
# The private vmad the root client's library started may linger: a system
# one takes its place.
for p in $(ip netns pids "$P-b" 2>/dev/null); do
	[ "$(cat "/proc/$p/comm" 2>/dev/null)" = vmad ] && kill -TERM "$p" 2>/dev/null
done
for _ in $(seq 50); do
	n=0
	for p in $(ip netns pids "$P-b" 2>/dev/null); do [ "$(cat "/proc/$p/comm" 2>/dev/null)" = vmad ] && n=1; done
	[ $n = 0 ] && break
	sleep 0.1
done
$B "$VMAD" --daemon --log "$TMP/vmad.log" -v || { failed "vmad --daemon starts"; }
VMAD_PID=$(pgrep -n -f "$VMAD --daemon --log $TMP/vmad.log")
client nobody $NOBODY
if grep -q "flow table is full" "$TMP/vmad.log"; then
	failed "nobody: vmad's flow table filled: $(grep -m1 "flow table is full" "$TMP/vmad.log")"
else
	pass "nobody: vmad's flow table held every flow"
fi

# killed_worker TAG MODEL [MP_SERVER_OPTION...]: parts 3 (prefork: one of
# two workers killed) and 4 (single: the server killed).
SRV_PORT=7330
killed_worker() {
	local tag=$1 model=$2
	shift 2
	SRV_PORT=$((SRV_PORT + 1))
	$B env LD_PRELOAD="$LIB" "$BUILD/tests/integration/mp_server" --port $SRV_PORT --bind 198.18.0.2 \
		--model "$model" --workers 2 --size 16 --max-seconds 120 "$@" >"$TMP/$tag.srv" 2>"$TMP/$tag.srv.err" &
	local srv=$!
	for _ in $(seq 100); do grep -q '^ready' "$TMP/$tag.srv" && break; sleep 0.1; done
	local passive0
	passive0=$(passive_opens)
	mkfifo "$TMP/$tag.in"
	$A python3 "$TMP/echo_client.py" 198.18.0.2 $SRV_PORT "$N" recheck >"$TMP/$tag.out" 2>"$TMP/$tag.err" \
		<"$TMP/$tag.in" &
	local cli=$!
	exec 3>"$TMP/$tag.in"
	wait_ready "$TMP/$tag.out" $cli
	local victim est ok
	victim=$(awk '/^worker [0-9]+$/ { print $2; exit }' "$TMP/$tag.srv")
	[ "$model" = single ] && victim=$srv
	if ! grep -q "^ready $N\$" "$TMP/$tag.out" || [ -z "$victim" ]; then
		failed "$tag: $N connections to the pre-fork server echoed ($(head -c 300 "$TMP/$tag.out" "$TMP/$tag.err" | tr '\n' ' '))"
		exec 3>&-
		kill $cli $srv 2>/dev/null
		wait $cli $srv 2>/dev/null
		return
	fi
	local passive=$(($(passive_opens) - passive0))
	if [ "$passive" = 0 ]; then
		pass "$tag: all offloaded (the server namespace's kernel Tcp PassiveOpens +0)"
	else
		failed "$tag: $passive connections accepted by the server namespace's kernel (not offloaded)"
	fi
	kill -9 "$victim"
	[ "$victim" = "$srv" ] && { wait $srv; } 2>/dev/null
	sleep 5
	est=$($A ss -Htn state established "( dport = :$SRV_PORT )" | wc -l)
	echo go >&3
	exec 3>&-
	wait $cli
	ok=$(sed -n 's/^echoing //p' "$TMP/$tag.out")
	if [ "$model" = single ]; then
		if [ "$est" = 0 ] && [ "$ok" = 0 ]; then
			pass "$tag: the server killed with SIGKILL: all $N connections were reset at the client within 5 s"
		else
			failed "$tag: the server killed with SIGKILL: $est connections still established at the client 5 s later, ${ok:-?} of $N echo"
		fi
	elif [ -n "$ok" ] && [ "$ok" -gt 0 ] && [ "$ok" -lt "$N" ] && [ "$est" = "$ok" ]; then
		pass "$tag: a worker killed with SIGKILL: its $((N - ok)) connections were reset at the client within 5 s, the other worker's $ok still echo"
	else
		failed "$tag: a worker killed with SIGKILL: $est connections still established at the client 5 s later, ${ok:-?} of $N still echo"
	fi
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
}

echo "== 3. a pre-fork server's worker killed with $N connections"
killed_worker prefork-root prefork
killed_worker prefork-nobody prefork --user nobody

echo "== 4. a one-process server killed with $N connections"
killed_worker single-root single
killed_worker single-nobody single --user nobody

echo "many_flows: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]

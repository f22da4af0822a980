#!/bin/bash
# SocketXtreme (docs/extra_api.md) against kernel peers. Usage:
# extra_xtreme.sh BUILDDIR (exit 0 pass, 1 fail, 77 skip).
#
#  - tests/extra/xtreme_server (the manual's SocketXtreme server, echoing)
#    under libvma with VMA_SOCKETXTREME=1 in XTR-b: three kernel clients
#    in XTR-a each send 60000 bytes in pieces of random size over TCP and
#    read them back; 200 datagrams go to its UDP socket and come back.
#    Every byte intact, each connection auto-accepted (listen_fd, user_data)
#    and ended by its close event, a buffer kept with ref_vma_buff, the
#    buffer calls' errors; the server namespace's kernel Tcp InSegs and Udp
#    InDatagrams stay flat (offloaded).
#  - tests/extra/xtreme_connect in XTR-b: a non-blocking connect completed
#    by socketxtreme_poll (EPOLLOUT, user_data), 300000 bytes echoed by a
#    kernel server and read from PACKET completions, the peer's close
#    (EPOLLRDHUP), a refused connect (EPOLLERR | EPOLLHUP).
#  - the same server without VMA_SOCKETXTREME=1: the SocketXtreme calls
#    fail with EOPNOTSUPP and one warning names the parameter.
set -u
BUILD=${1:?usage: extra_xtreme.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/extra/xtreme_server tests/extra/xtreme_connect
X=$BUILD/tests/extra
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${XTREME_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM
PIDS=""   # the server (also in SRV) and the echo peer
pair_extra_cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
}
pair_up vmaxtr extra_xtreme
tcp_in() { $B awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }
# VMA_TEST_PRELOAD (e.g. the ASan runtime) goes before the library in LD_PRELOAD.
VMA="env LD_PRELOAD=${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB VMA_TRACELEVEL=warn"
$A ping -c 1 -W 1 198.18.0.2 >/dev/null 2>&1
$B ping -c 1 -W 1 198.18.0.1 >/dev/null 2>&1

# ---- the server ----
cat >"$WORK/clients.py" <<'PY'
import random, socket, sys, threading
ok = []
def conn(i):
    data = bytes(random.Random(i).getrandbits(8) for _ in range(60000))
    s = socket.create_connection(("198.18.0.2", 17200), timeout=10)
    got = bytearray()
    def reader():
        while len(got) < len(data):
            d = s.recv(65536)
            if not d:
                break
            got.extend(d)
    t = threading.Thread(target=reader)
    t.start()
    off, rnd = 0, random.Random(100 + i)
    while off < len(data):
        n = rnd.randint(1, 3000)
        s.sendall(data[off:off + n])
        off += n
    t.join(15)
    ok.append(bytes(got) == data)
    s.close()
ts = [threading.Thread(target=conn, args=(i,)) for i in range(3)]
for t in ts:
    t.start()
for t in ts:
    t.join()
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(2)
uok = 0
for i in range(200):
    body = bytes((i + k) & 0xff for k in range(20 + i))
    u.sendto(body, ("198.18.0.2", 17200))
    try:
        if u.recv(4096) == body:
            uok += 1
    except socket.timeout:
        pass
print("tcp intact %d/3 udp echoed %d/200" % (sum(ok), uok))
sys.exit(0 if sum(ok) == 3 and uok == 200 else 1)
PY
t0=$(tcp_in) u0=$(udp_in)
$B $VMA VMA_SOCKETXTREME=1 timeout 60 "$X/xtreme_server" "$TB_PREFIX-b0" 198.18.0.2 17200 3 200 \
	>"$WORK/server.out" 2>&1 &
SRV=$!
PIDS="$PIDS $SRV"
for _ in $(seq 100); do grep -q 'Waiting on' "$WORK/server.out" && break; sleep 0.05; done
$A timeout 60 python3 "$WORK/clients.py" >"$WORK/clients.out" 2>&1
crc=$?
wait $SRV
src=$?
t1=$(tcp_in) u1=$(udp_in)
cat "$WORK/clients.out"
grep -E '^(conn|Accepted|FAIL|udp echoed|xtreme_server)' "$WORK/server.out"
check $crc "kernel clients: 3 x 60000 bytes and 200 datagrams echoed intact"
check $src "xtreme_server: accepts, packets, close events and buffer calls as documented"
[ "$(grep -c '^conn fd=.* bytes=60000 ' "$WORK/server.out")" = 3 ]
check $? "each connection echoed its 60000 bytes and ended with its close event"
[ $((t1 - t0)) -le 10 ] && [ $((u1 - u0)) -le 5 ]
check $? "offloaded: server Tcp InSegs +$((t1 - t0)), Udp InDatagrams +$((u1 - u0))"

# ---- the client: non-blocking connect with completion events ----
cat >"$WORK/echo.py" <<'PY'
import socket, threading
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("198.18.0.1", 17100))
l.listen(4)
print("ready", flush=True)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
: >"$WORK/echo.out"
$A python3 "$WORK/echo.py" >"$WORK/echo.out" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 100); do grep -q ready "$WORK/echo.out" && break; sleep 0.05; done
t0=$(tcp_in)
$B $VMA VMA_SOCKETXTREME=1 timeout 60 "$X/xtreme_connect" 198.18.0.1 17100 17101 300000 >"$WORK/connect.out" 2>&1
rc=$?
t1=$(tcp_in)
cat "$WORK/connect.out"
check $rc "xtreme_connect: connect, echo, close and refusal as completions"
[ $((t1 - t0)) -le 10 ]
check $? "offloaded: client namespace Tcp InSegs +$((t1 - t0))"

# ---- without VMA_SOCKETXTREME=1 ----
$B $VMA timeout 30 "$X/xtreme_connect" 198.18.0.1 17100 17101 1000 >"$WORK/off.out" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(grep -c 'needs SocketXtreme mode: set VMA_SOCKETXTREME=1' "$WORK/off.out")" = 1 ] &&
	grep -q 'FAIL: socketxtreme_poll: Operation not supported' "$WORK/off.out"
check $? "without VMA_SOCKETXTREME=1: socketxtreme_poll fails (EOPNOTSUPP), one warning naming the parameter"

[ $fail = 0 ] && echo "extra_xtreme: all checks passed"
exit $fail

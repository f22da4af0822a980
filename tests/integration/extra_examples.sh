#!/bin/bash
# The Extra API's example programs (tests/extra/, docs/extra_api.md
# "Examples") against kernel peers. Usage: extra_examples.sh BUILDDIR
# (exit 0 pass, 1 fail, 77 skip).
#
# EXE-b runs the programs under libvma, EXE-a the kernel peers: a UDP
# service that sends datagrams on request, a UDP and a TCP sink that count
# what reaches them.
#  - zcopy_udp_recv: 2700 datagrams read in place (MSG_VMA_ZCOPY_FORCE),
#    held in batches of 64 and freed, through a ring of 512 receive frames
#    (a leaked frame would dry it up); 300 of 3000 bytes, which the peer's
#    kernel fragments and the ring leaves to the kernel: refused under
#    FORCE (EOPNOTSUPP), copied without it;
#  - cb_filter_recv: the callback lets even datagrams through, drops odd
#    ones, holds some; recvfrom reads exactly those let through;
#  - tcp_zcopy_cb: on TCP, a callback that lets buffers through, drops and
#    holds some (recv reads exactly those let through, in order), and
#    recvfrom_zcopy reading a 2 MB stream in place;
#  - dummy_warmup: the manual's dummy-send loop on UDP and TCP; the sinks
#    get the real messages only (no dummy on the wire), the counters say
#    how many dummies were sent ("Tx Dummy messages"), EINVAL on kernel
#    sockets; once more with VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME=1;
#  - api_members and api_members_local (the same program built against our
#    header and against its own declarations of the ABI): every member
#    with its documented result, with and without VMA_SOCKETXTREME=1, and
#    without libvma (vma_get_api() NULL: the plain-socket fallback).
#  - vma_udp_lat (the benchmark's latency tool): every receive method
#    alone and interleaved (-r mix), both ends under libvma, none lost.
# The receiving namespace's kernel Udp InDatagrams stay flat under the
# offloaded runs.
set -u
BUILD=${1:?usage: extra_examples.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
PROGS="zcopy_udp_recv cb_filter_recv tcp_zcopy_cb dummy_warmup api_members api_members_local"
# shellcheck disable=SC2046 # one target per program
pair_prereq $(for p in $PROGS; do echo "tests/extra/$p"; done)
X=$BUILD/tests/extra
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${EXTRA_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM   # SRV: the kernel peers
pair_up vmaexe extra_examples

cat >"$WORK/peer.py" <<'PY'
import socket, struct, threading, time, sys
# "n port size" on 17000: n datagrams (4-byte seq, then byte k = seq + k).
def sender():
    ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    ctl.bind(("198.18.0.1", 17000))
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    while True:
        msg, (host, _) = ctl.recvfrom(100)
        n, port, size = (int(x) for x in msg.split())
        for i in range(n):
            body = struct.pack("!I", i) + bytes((i + k) & 0xff for k in range(4, size))
            out.sendto(body[:size], (host, port))
            if i % 50 == 49:
                time.sleep(0.004)
# 17301 UDP and 17300 TCP sinks: what reached them, on "report" to 17302.
counts = {"udp": 0, "udp_bad": 0, "tcp": 0, "tcp_bad": 0}
def udp_sink():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("198.18.0.1", 17301))
    while True:
        d = s.recv(2048)
        counts["udp"] += 1
        if not (len(d) == 64 and d.startswith(b"REAL")):
            counts["udp_bad"] += 1
def tcp_sink():
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("198.18.0.1", 17300))
    l.listen(4)
    while True:
        c, _ = l.accept()
        data = b""
        while True:
            d = c.recv(65536)
            if not d:
                break
            data += d
        counts["tcp"] += len(data)
        for i in range(0, len(data), 64):
            if not data[i:i + 64].startswith(b"REAL%05d" % (i // 64)):
                counts["tcp_bad"] += 1
        c.close()
def report():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("198.18.0.1", 17302))
    while True:
        msg, addr = s.recvfrom(100)
        if msg == b"reset":
            for k in counts:
                counts[k] = 0
        s.sendto(("%d %d %d %d" % (counts["udp"], counts["udp_bad"], counts["tcp"], counts["tcp_bad"])).encode(), addr)
# 17303: on each connection, once a byte came, STREAM bytes (i * 31 % 251),
# then our half closes; the connection ends at the client's close.
STREAM = 2000000
pattern = bytes((i * 31) % 251 for i in range(251 * 31))
def streamer():
    l = socket.socket()
    l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    l.bind(("198.18.0.1", 17303))
    l.listen(4)
    def serve(c):
        c.recv(1)
        left, off = STREAM, 0
        while left:
            chunk = bytes((i * 31) % 251 for i in range(off, off + min(left, 65536)))
            c.sendall(chunk)
            off += len(chunk)
            left -= len(chunk)
        c.shutdown(socket.SHUT_WR)
        while c.recv(65536):
            pass
        c.close()
    while True:
        c, _ = l.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
for f in (sender, udp_sink, tcp_sink, report, streamer):
    threading.Thread(target=f, daemon=True).start()
print("ready", flush=True)
while True:
    time.sleep(3600)
PY
: >"$WORK/peer.out"
$A python3 "$WORK/peer.py" >"$WORK/peer.out" 2>&1 &
SRV=$!
for _ in $(seq 100); do grep -q ready "$WORK/peer.out" && break; sleep 0.05; done
$B ping -c 1 -W 1 198.18.0.1 >/dev/null 2>&1
sink() { # sink reset|report: "udp udp_bad tcp tcp_bad"
	$B python3 -c "
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)
s.sendto(sys.argv[1].encode(), ('198.18.0.1', 17302)); print(s.recv(100).decode())" "$1"
}
# udp_in [NS_CMD]: Udp InDatagrams in the server's namespace, or in NS_CMD's ($A)
udp_in() { ${1:-$B} awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }
# VMA_TEST_PRELOAD (e.g. the ASan runtime) goes before the library in LD_PRELOAD.
VMA="env LD_PRELOAD=${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB VMA_TRACELEVEL=warn"

# zero-copy receiver through 512 receive frames
u0=$(udp_in)
$B $VMA VMA_RX_BUFS=512 VMA_RX_WRE=256 timeout 60 "$X/zcopy_udp_recv" 198.18.0.1 17000 198.18.0.2 18200 3000 200 10 \
	>"$WORK/zc.out" 2>&1
rc=$?
u1=$(udp_in)
cat "$WORK/zc.out"
check $rc "zcopy_udp_recv: 2700 datagrams lent in place and freed, 300 fragmented ones copied"
[ $((u1 - u0)) -le 305 ]
check $? "zcopy_udp_recv offloaded but for the 300 fragmented (server Udp InDatagrams +$((u1 - u0)))"

# callback-filtering receiver
u0=$(udp_in)
$B $VMA timeout 60 "$X/cb_filter_recv" 198.18.0.1 17000 198.18.0.2 18201 2000 >"$WORK/cb.out" 2>&1
rc=$?
u1=$(udp_in)
cat "$WORK/cb.out"
check $rc "cb_filter_recv: the callback filtered 2000 datagrams in the reading thread"
[ $((u1 - u0)) -le 5 ]
check $? "cb_filter_recv offloaded (server Udp InDatagrams +$((u1 - u0)))"

# the receive callback and zero-copy receive on TCP
t0=$($B awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp)
$B $VMA timeout 60 "$X/tcp_zcopy_cb" 198.18.0.1 17303 2000000 >"$WORK/tz.out" 2>&1
rc=$?
t1=$($B awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp)
cat "$WORK/tz.out"
check $rc "tcp_zcopy_cb: callback (RECV/DROP/HOLD) and recvfrom_zcopy on TCP, 2 x 2000000 bytes"
[ $((t1 - t0)) -le 10 ]
check $? "tcp_zcopy_cb offloaded (Tcp InSegs +$((t1 - t0)))"

# dummy-send warm-up, then with the getsockname() trigger
for trig in 0 1; do
	sink reset >/dev/null
	$B $VMA VMA_TRACELEVEL=info VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME=$trig timeout 60 \
		"$X/dummy_warmup" 198.18.0.1 17301 17300 300 >"$WORK/dw.out" 2>&1
	rc=$?
	grep -E '^(PASS|FAIL|dummy:)' "$WORK/dw.out"
	check $rc "dummy_warmup (VMA_TRIGGER_DUMMY_SEND_GETSOCKNAME=$trig)"
	sleep 0.3
	read -r su sbad st tbad < <(sink report)
	[ "$su" = 300 ] && [ "$sbad" = 0 ] && [ "$st" = $((300 * 64)) ] && [ "$tbad" = 0 ]
	check $? "sinks got the 300 real messages only: udp $su (bad $sbad), tcp $st bytes (bad $tbad)"
	want=$(sed -n 's/^dummy: .*udp_dummies \([0-9]*\).*/\1/p' "$WORK/dw.out")
	# The first fd dumped is the UDP socket.
	got=$(grep -m1 -o 'Tx Dummy messages : [0-9]*' "$WORK/dw.out" | awk '{print $NF}')
	[ -n "$want" ] && [ "$got" = "$want" ]
	check $? "udp socket counted $got dummies (sent $want)"
done

# every member, built against the header and against local declarations
for p in api_members api_members_local; do
	for xt in 0 1; do
		$B $VMA VMA_SOCKETXTREME=$xt timeout 60 "$X/$p" 198.18.0.1 17000 198.18.0.2 18202 >"$WORK/am.out" 2>&1
		rc=$?
		grep -q '^FAIL' "$WORK/am.out" && grep '^FAIL' "$WORK/am.out"
		grep -q 'ok (extra api)' "$WORK/am.out"
		[ $rc = 0 ] && [ $? = 0 ]
		check $? "$p under libvma, VMA_SOCKETXTREME=$xt: $(grep -c '^PASS' "$WORK/am.out") checks passed"
	done
	$B timeout 30 "$X/$p" 198.18.0.1 17000 198.18.0.2 18203 >"$WORK/am.out" 2>&1
	rc=$?
	[ $rc = 0 ] && grep -q 'ok (fallback)' "$WORK/am.out"
	check $? "$p without libvma: vma_get_api() NULL, plain sockets"
done

# vma_udp_lat (tools/udp_lat), the benchmark's latency tool: each receive
# method alone, then interleaved (-r mix), both ends under libvma; every
# round answered with the same bytes, the mix's rounds split evenly among
# its methods, both namespaces' kernel Udp counters flat.
LAT=$BUILD/tools/udp_lat/vma_udp_lat
[ -x "$LAT" ] || make -C "$BUILD" -s tools/udp_lat/vma_udp_lat >/dev/null 2>&1
lat_port=18300
for mode in recv cb zcopy xtreme mix; do
	lat_port=$((lat_port + 1))
	u0=$(udp_in); a0=$(udp_in "$A")
	$B $VMA VMA_SOCKETXTREME=1 timeout 30 "$LAT" -s -i 198.18.0.2 -p $lat_port -r $mode -x 3000 \
		>"$WORK/lat_srv.out" 2>&1 &
	lat_srv=$!
	sleep 0.5
	$A $VMA VMA_SOCKETXTREME=1 timeout 30 "$LAT" -c 198.18.0.2 -p $lat_port -r $mode -n 3000 -w 0 -b 50 \
		>"$WORK/lat.out" 2>&1
	rc=$?
	wait $lat_srv
	src=$?
	u1=$(udp_in); a1=$(udp_in "$A")
	cat "$WORK/lat.out"
	if [ $mode = mix ]; then
		# 3000 rounds in blocks of 50: 20 blocks each of recv, zcopy, xtreme.
		want="mix-recv:1000 mix-zcopy:1000 mix-xtreme:1000"
		served="served 3000 recv 1000 zcopy 1000 xtreme 1000"
	else
		want="$mode:3000"
		served="served 3000"
	fi
	got=$(sed -n 's/^mode=\([a-z-]*\) rounds=\([0-9]*\) lost=0 .*/\1:\2/p' "$WORK/lat.out" | tr '\n' ' ' | sed 's/ $//')
	[ $rc = 0 ] && [ $src = 0 ] && [ "$got" = "$want" ] && grep -qx "vma_udp_lat: $served" "$WORK/lat_srv.out"
	check $? "vma_udp_lat -r $mode: 3000 round trips, none lost, by method $got (want $want); server: $(tail -1 "$WORK/lat_srv.out")"
	[ $((u1 - u0)) -lt 10 ] && [ $((a1 - a0)) -lt 10 ]
	check $? "vma_udp_lat -r $mode offloaded (Udp InDatagrams server +$((u1 - u0)), client +$((a1 - a0)))"
done

[ $fail = 0 ] && echo "extra_examples: all checks passed"
exit $fail

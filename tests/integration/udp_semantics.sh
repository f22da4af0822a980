#!/bin/bash
# Offloaded UDP socket semantics against the kernel as the reference (root).
# Usage: udp_semantics.sh [BUILDDIR | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Runs tests/integration/udp_semantics (see its header) on a private testbed:
#   kernel test vs kernel peer (the reference: proves the expectations),
#   libvma test vs kernel peer, libvma test vs libvma peer,
#   unprivileged libvma test (uid 65534): kernel path, one ring warning naming
#   the interface and the reason;
# then `use os udp_receiver *:PORT` keeps that port on the kernel while
# another is offloaded, VMA_OFFLOADED_SOCKETS=0 keeps everything on the
# kernel (server namespace Udp InDatagrams show it), and iperf2 -u with both
# ends under libvma. UDP_SEM_PRELOAD (e.g. the ASan runtime) is put before the
# library in LD_PRELOAD. UDP_SEM_TB_PREFIX (default vmasem) names the testbed so
# two runs can share a machine. UDP_SEM_QUICK=1 stops after the three
# semantics passes (kernel reference, libvma vs kernel and libvma peers).
set -u
ARG=${1:-$(dirname "$0")/../..}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "$ARG" ]; then BUILD=$ARG; LIB=$ARG/src/vma/.libs/libvma.so; else LIB=$ARG; BUILD=$(dirname "$LIB")/../../..; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
LIB=$(readlink -f "$LIB")
PROG=$BUILD/tests/integration/udp_semantics
if [ ! -x "$PROG" ]; then   # not built by `make check` yet: build it here
	PROG=$(mktemp /tmp/udp_semantics.XXXXXX)
	cc -std=gnu11 -O2 -o "$PROG" "$HERE/udp_semantics.c" -lpthread || { echo "SKIP: cannot build the helper"; exit 77; }
fi
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
export TB_PREFIX=${UDP_SEM_TB_PREFIX:-vmasem}
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
TMP=$(mktemp -d)
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
# veth TX checksum offload leaves kernel datagrams with a partial checksum.
$A ethtool -K $TB_PREFIX-a0 tx off >/dev/null 2>&1
$B ethtool -K $TB_PREFIX-b0 tx off >/dev/null 2>&1
chmod 755 "$TMP"
VMA="env LD_PRELOAD=${UDP_SEM_PRELOAD:+$UDP_SEM_PRELOAD:}$LIB VMA_TRACELEVEL=2"   # ld.so takes ":"
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }

semantics() {  # $1 peer prefix, $2 test prefix, $3 label
	$A $1 "$PROG" peer 198.18.0.1 >"$TMP/peer.log" 2>&1 & local peer=$!
	sleep 1
	$B $2 timeout 120 "$PROG" test 198.18.0.1 198.18.0.2 $TB_PREFIX-b0 >"$TMP/test.log" 2>&1; local rc=$?
	kill $peer 2>/dev/null; wait $peer 2>/dev/null
	grep -E "^(FAIL|INFO)" "$TMP/test.log" | sed "s/^/  [$3] /"
	grep -h -A14 -E "ERROR|runtime error" "$TMP/test.log" "$TMP/peer.log" | head -20 | sed "s/^/  [$3] /"
	! grep -qE "AddressSanitizer|runtime error" "$TMP/test.log" "$TMP/peer.log" && [ $rc = 0 ]
	check $? "$3: $(grep -c '^PASS' "$TMP/test.log") checks pass ($(tail -1 "$TMP/test.log"))"
}
semantics "" "" "kernel reference"
semantics "" "$VMA" "libvma test, kernel peer"
semantics "$VMA" "$VMA" "libvma test, libvma peer"
[ "${UDP_SEM_QUICK:-0}" = 1 ] && exit $fail
semantics "" "$VMA setpriv --reuid 65534 --regid 65534 --clear-groups" "unprivileged libvma"
warn=$(grep -c "VMA WARNING: ring:" "$TMP/test.log")
grep "VMA WARNING: ring:" "$TMP/test.log" | sed 's/^/  /'
[ "$warn" = 1 ] && grep -q "ring: $TB_PREFIX-b0: .*privilege.*kernel path" "$TMP/test.log"
check $? "unprivileged: exactly one ring warning, naming $TB_PREFIX-b0 and the missing privilege ($warn)"

# Receiver: counts what arrives on two ports.
RECV='
import socket,sys,time
ss=[]
for p in (9300,9301):
  s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",p)); s.setblocking(False); ss.append(s)
print("ready",flush=True)
# Until both 200 are in (a slow start of the senders on a busy machine
# must not cut the count short), 15 s at most.
n=[0,0]; end=time.time()+15
while time.time()<end and n!=[200,200]:
  for i,s in enumerate(ss):
    try: s.recv(100); n[i]+=1
    except BlockingIOError: pass
print(n[0],n[1],flush=True)
'
SEND='
import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
for i in range(200): s.sendto(b"x"*20,("198.18.0.2",int(sys.argv[1]))); time.sleep(0.001)
'
counted() {  # $1 receiver prefix, $2 label, $3 $4 min max kernel datagrams on 9301
	$B $1 python3 -c "$RECV" >"$TMP/recv.log" 2>&1 & local r=$!
	# A slow start (sanitizer build, busy machine) must not lose the first datagrams.
	for _ in $(seq 100); do grep -q ready "$TMP/recv.log" && break; sleep 0.1; done
	local b0; b0=$(udp_in)
	$A python3 -c "$SEND" 9300; sleep 0.3
	local b1; b1=$(udp_in)
	$A python3 -c "$SEND" 9301; sleep 0.3
	local b2; b2=$(udp_in)
	wait $r
	local got; got=$(tail -1 "$TMP/recv.log")
	echo "  [$2] received on 9300/9301: $got; kernel InDatagrams: 9300 +$((b1 - b0)), 9301 +$((b2 - b1))"
	[ "$got" = "200 200" ] && [ $((b1 - b0)) -ge 200 ] && [ $((b2 - b1)) -ge "$3" ] && [ $((b2 - b1)) -le "$4" ]
}
printf 'use os udp_receiver *:9300\n' >"$TMP/libvma.conf"
counted "$VMA VMA_CONFIG_FILE=$TMP/libvma.conf" "use os rule" 0 5
check $? "use os udp_receiver *:9300: 9300 via the kernel, 9301 offloaded"
counted "$VMA VMA_OFFLOADED_SOCKETS=0" "VMA_OFFLOADED_SOCKETS=0" 200 1000
check $? "VMA_OFFLOADED_SOCKETS=0: both ports via the kernel"

# iperf2 -u, both ends under libvma.
$B $VMA timeout 20 iperf -s -u -p 5201 >"$TMP/iperf_s.log" 2>&1 & srv=$!
sleep 1
$A $VMA timeout 20 iperf -u -c 198.18.0.2 -p 5201 -b 50M -t 2 >"$TMP/iperf_c.log" 2>&1; rc=$?
kill $srv 2>/dev/null; wait $srv 2>/dev/null
report=$(grep -E "Mbits/sec.*\([0-9.e+-]+%\)" "$TMP/iperf_c.log" | tail -1)
echo "  [iperf -u] $report"
grep -E "ERROR|AddressSanitizer|runtime error" "$TMP/iperf_c.log" "$TMP/iperf_s.log" | head -3
[ $rc = 0 ] && [ -n "$report" ] && ! grep -qE "AddressSanitizer|runtime error" "$TMP/iperf_c.log" "$TMP/iperf_s.log"
check $? "iperf -u -b 50M -t 2 under libvma both ends: rate and loss reported"
exit $fail

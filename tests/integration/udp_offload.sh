#!/bin/bash
# Offloaded UDP end to end on a private two-namespace testbed (root).
# Usage: udp_offload.sh [path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Checks: sizes 0..65507 echoed intact (kernel peer <-> libvma, libvma <->
# libvma), the server namespace's Udp InDatagrams flat under libvma,
# SO_RCVTIMEO -> EAGAIN, non-blocking EAGAIN, loopback datagrams to an
# offloaded socket, two multicast receivers in one process, sockperf pp.
set -u
LIB=${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}
# tests/integration/run.sh passes the build directory.
[ -d "$LIB" ] && LIB=$LIB/src/vma/.libs/libvma.so
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
LIB=$(readlink -f "$LIB")
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_PREFIX=vmaudp
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT
A="nsenter --net=/run/netns/vmaudp-a"
B="nsenter --net=/run/netns/vmaudp-b"
# A veth sends kernel datagrams with CHECKSUM_PARTIAL (no UDP checksum in the
# frame): XDP hands them to us as they are and our stack drops them as bad.
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
$A ethtool -K vmaudp-a0 tx off >/dev/null 2>&1
$B ethtool -K vmaudp-b0 tx off >/dev/null 2>&1
VMA="env LD_PRELOAD=$LIB VMA_TRACELEVEL=2"
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }

ECHO_SRV='
import socket,sys
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.bind(("198.18.0.2",int(sys.argv[1])))
s.settimeout(10)
try:
  while True:
    d,a=s.recvfrom(70000)
    s.sendto(d,a)
    if d==b"QUIT": break
except socket.timeout: pass
'
ECHO_CLI='
import socket,sys,os
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.settimeout(3)
bad=0
for n in (0,1,64,1472,1473,8000,65507):
  p=os.urandom(n)
  for i in range(20):
    s.sendto(p,("198.18.0.2",int(sys.argv[1])))
    d,a=s.recvfrom(70000)
    if d!=p or a!=("198.18.0.2",int(sys.argv[1])): bad+=1; print("mismatch size",n)
print("sizes ok" if not bad else "sizes BAD")
s.sendto(b"QUIT",("198.18.0.2",int(sys.argv[1])))
sys.exit(1 if bad else 0)
'
run_echo() {  # $1 server prefix, $2 client prefix, $3 port, $4 label
	$B $1 python3 -c "$ECHO_SRV" "$3" & local srv=$!
	sleep 1
	$A $2 timeout 30 python3 -c "$ECHO_CLI" "$3"; local rc=$?
	wait $srv
	check $rc "$4: sizes 0,1,64,1472,1473,8000,65507 intact both ways"
}
before=$(udp_in)
run_echo "$VMA" "" 12001 "kernel client -> libvma server"
after=$(udp_in)
# Fragmented datagrams (1473, 8000, 65507: 60 of 141) are not steered by the
# ring (fragments carry no ports) and arrive through the kernel socket.
[ $((after - before)) -le 62 ]; check $? "server Udp InDatagrams: only the 60 fragmented datagrams via the kernel (delta $((after - before)) of 141)"
run_echo "$VMA" "$VMA" 12002 "libvma <-> libvma"
run_echo "" "$VMA" 12003 "libvma client -> kernel server"

# SO_RCVTIMEO, non-blocking EAGAIN, loopback delivery, multicast x2.
$B $VMA python3 - <<'PY'; check $? "RCVTIMEO EAGAIN, nonblocking EAGAIN, loopback to offloaded socket, 2 mc receivers"
import socket,struct,time,errno,sys
ok=True
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("0.0.0.0",12010))
s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVTIMEO,struct.pack("ll",0,300000))
t=time.time()
try: s.recv(100); ok=False; print("no timeout")
except BlockingIOError: pass
except OSError as e: ok = ok and e.errno==errno.EAGAIN
dt=time.time()-t; print("timeout after %.3fs"%dt); ok = ok and 0.25<dt<1.5
s.setblocking(False)
try: s.recv(100); ok=False
except BlockingIOError: print("nonblocking EAGAIN")
s.setblocking(True)
c=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); c.sendto(b"lo",("127.0.0.1",12010))
d=s.recv(100); print("loopback got",d); ok = ok and d==b"lo"
rs=[]
for i in range(2):
  r=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); r.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
  r.bind(("0.0.0.0",12011)); r.setsockopt(socket.IPPROTO_IP,socket.IP_ADD_MEMBERSHIP,socket.inet_aton("239.1.2.3")+socket.inet_aton("198.18.0.2"))
  r.settimeout(3); rs.append(r)
import subprocess
subprocess.run(["nsenter","--net=/run/netns/vmaudp-a","python3","-c",
 "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\ns.setsockopt(socket.IPPROTO_IP,socket.IP_MULTICAST_IF,socket.inet_aton('198.18.0.1'))\nfor i in range(5): s.sendto(b'mc%d'%i,('239.1.2.3',12011))"],env={})
for r in rs:
  got=[r.recv(100) for i in range(5)]
  print("mc receiver got",got); ok = ok and got==[b"mc%d"%i for i in range(5)]
sys.exit(0 if ok else 1)
PY

# sockperf both ends under libvma, kernel counters flat.
before=$(udp_in)
$B $VMA sockperf sr -i 198.18.0.2 -p 12020 >/dev/null 2>&1 & srv=$!
sleep 1
out=$($A $VMA timeout 20 sockperf pp -i 198.18.0.2 -p 12020 -t 2 -m 64 2>&1); rc=$?
kill $srv; wait $srv 2>/dev/null
after=$(udp_in)
echo "$out" | grep -o "avg-latency=[0-9.]*"
[ $rc = 0 ] && echo "$out" | grep -q avg-latency; check $? "sockperf pp under libvma completes"
[ $((after - before)) -lt 100 ]; check $? "kernel Udp InDatagrams flat during sockperf (delta $((after - before)))"
exit $fail

#!/bin/bash
# The verbs ring backend on softverbs (docs/verbs.md), end to end on a
# private two-namespace testbed (root).
# Usage: verbs_backend.sh [builddir | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Checks: with VMA_RING_BACKEND=verbs an offloaded UDP server runs on a
# verbs ring (its debug line names the softverbs device), datagrams echo
# intact while the server namespace's kernel Udp InDatagrams stays flat (the
# rule takes them away from the kernel), its nftables ingress table holds
# the steered port while it runs and disappears when the process is killed
# with SIGKILL (then the kernel serves the port again); a TCP listener
# accepts with the kernel's TcpPassiveOpens flat; QP creation refused and no
# device give exactly one warning each and the xdp backend carries the
# traffic; auto picks verbs where softverbs serves the interface; the
# default (xdp) never opens a verbs device; softverbs saw no violation.
set -u
ARG=${1:-$(dirname "$0")/../..}
[ -d "$ARG" ] || ARG=$(cd "$(dirname "$ARG")/../../.." && pwd)
BUILD=$(cd "$ARG" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
SV=$BUILD/tests/softverbs/lib
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
[ -e "$SV/libibverbs.so.1" ] || { echo "SKIP: softverbs not built (configure found no rdma-core, or make check not run)"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: needs nft"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
# Each case names its backend and softverbs settings itself.
unset VMA_RING_BACKEND SOFTVERBS_FAIL SOFTVERBS_NETDEVS LD_LIBRARY_PATH
export TB_PREFIX=vmavrb
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null 2>&1 || { echo "SKIP: testbed"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT
A="nsenter --net=/run/netns/vmavrb-a"
B="nsenter --net=/run/netns/vmavrb-b"
IF=vmavrb-b0
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }
tcp_passive() { $B awk '/^Tcp:/{n++; if(n==2) print $6}' /proc/net/snmp; }
VERBS="env LD_LIBRARY_PATH=$SV LD_PRELOAD=$LIB SOFTVERBS_STATS=1 VMA_STATS_SHMEM_DIR=$TMP"

SRV='
import socket,sys,time
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.bind(("198.18.0.2",int(sys.argv[1])))
s.settimeout(float(sys.argv[2]) if len(sys.argv)>2 else 10)
open(sys.argv[3] if len(sys.argv)>3 else "/dev/null","w").write("up\n")
try:
  while True:
    d,a=s.recvfrom(70000)
    s.sendto(d,a)
    if d==b"QUIT": break
except socket.timeout: pass
'
CLI='
import socket,sys,os
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.settimeout(3)
bad=0
for n in (1,64,1000,1472):
  for i in range(25):
    p=os.urandom(n)
    s.sendto(p,("198.18.0.2",int(sys.argv[1])))
    d,a=s.recvfrom(70000)
    if d!=p: bad+=1
if len(sys.argv)<3: s.sendto(b"QUIT",("198.18.0.2",int(sys.argv[1])))
sys.exit(1 if bad else 0)
'
wait_file() { local i; for i in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done; return 1; }

# 1. verbs: offloaded, kernel bypassed, rule in the owned nft table.
before=$(udp_in)
$B $VERBS VMA_RING_BACKEND=verbs VMA_TRACELEVEL=debug python3 -c "$SRV" 13001 10 "$TMP/up1" >"$TMP/srv1.log" 2>&1 &
srv=$!
wait_file "$TMP/up1"; sleep 0.3
table=$($B nft list tables 2>/dev/null | awk '/softverbs_/{print $3}' | head -1)
$B nft list table netdev "$table" >"$TMP/nft1" 2>/dev/null
grep -q '13001' "$TMP/nft1"; check $? "verbs: the steered port is in the process's nftables ingress table ($table)"
grep -q 'flags owner' "$TMP/nft1"; check $? "verbs: the table is owned by the process's netlink socket"
$A timeout 30 python3 -c "$CLI" 13001; check $? "verbs: 100 datagrams of 1..1472 bytes echoed intact"
wait $srv
after=$(udp_in)
[ $((after - before)) -eq 0 ]; check $? "verbs: server namespace's kernel Udp InDatagrams flat (delta $((after - before)))"
grep -q "verbs ring on sv_$IF port 1" "$TMP/srv1.log"; check $? "verbs: the ring is a verbs QP on softverbs device sv_$IF"
! grep -q "WARNING: ring" "$TMP/srv1.log"; check $? "verbs: no ring warning"
grep -q ' 0 violations' "$TMP/srv1.log" && ! grep -q VIOLATION "$TMP/srv1.log"; check $? "verbs: softverbs saw no violation"
$B nft list tables 2>/dev/null | grep -q softverbs_; [ $? != 0 ]; check $? "verbs: the table went with the process"

# 2. SIGKILL: the owned table goes with the netlink socket; the kernel
# serves the port again.
$B $VERBS VMA_RING_BACKEND=verbs python3 -c "$SRV" 13002 30 "$TMP/up2" >"$TMP/srv2.log" 2>&1 &
srv=$!
wait_file "$TMP/up2"; sleep 0.3
$A timeout 30 python3 -c "$CLI" 13002 keep; check $? "sigkill: offloaded before the kill"
$B nft list tables 2>/dev/null | grep -q softverbs_; check $? "sigkill: a softverbs table while the server runs"
kill -9 $srv; wait $srv 2>/dev/null
sleep 0.5
$B nft list tables 2>/dev/null | grep -q softverbs_; [ $? != 0 ]; check $? "sigkill: no softverbs table left after SIGKILL"
$B python3 -c "$SRV" 13002 10 "$TMP/up3" >/dev/null 2>&1 &
srv=$!
wait_file "$TMP/up3"
$A timeout 30 python3 -c "$CLI" 13002; check $? "sigkill: a kernel server on the same port gets every datagram"
wait $srv

# 3. TCP: the listener's SYNs never reach the kernel.
TSRV='
import socket,sys
s=socket.socket(); s.bind(("198.18.0.2",13003)); s.listen(4)
open(sys.argv[1],"w").write("up\n")
s.settimeout(20)
for i in range(3):
  c,a=s.accept(); c.settimeout(10)
  d=b""
  while len(d)<100000:
    x=c.recv(65536)
    if not x: break
    d+=x
  c.sendall(d); c.close()
'
TCLI='
import socket,os,sys
for i in range(3):
  c=socket.create_connection(("198.18.0.2",13003),timeout=10)
  p=os.urandom(100000); c.sendall(p)
  d=b""
  while len(d)<len(p):
    x=c.recv(65536)
    if not x: break
    d+=x
  if d!=p: sys.exit(1)
  c.close()
'
before=$(tcp_passive)
$B $VERBS VMA_RING_BACKEND=verbs python3 -c "$TSRV" "$TMP/up4" >"$TMP/srv4.log" 2>&1 &
srv=$!
wait_file "$TMP/up4"; sleep 0.3
$A timeout 60 python3 -c "$TCLI"; check $? "tcp: 3 connections echo 100000 bytes each through a verbs listener"
wait $srv
after=$(tcp_passive)
[ $((after - before)) -eq 0 ]; check $? "tcp: kernel TcpPassiveOpens flat (delta $((after - before)))"
grep -q ' 0 violations' "$TMP/srv4.log" && ! grep -q VIOLATION "$TMP/srv4.log"; check $? "tcp: softverbs saw no violation"

# 4. QP creation refused: one warning, the xdp backend serves.
$B $VERBS VMA_RING_BACKEND=verbs VMA_TRACELEVEL=warn SOFTVERBS_FAIL=ibv_create_qp:EPERM python3 -c "$SRV" 13004 10 "$TMP/up5" >"$TMP/srv5.log" 2>&1 &
srv=$!
wait_file "$TMP/up5"; sleep 0.3
before=$(udp_in)
$A timeout 30 python3 -c "$CLI" 13004; check $? "qp refused: datagrams echoed intact"
wait $srv
after=$(udp_in)
[ "$(grep -c 'WARNING' "$TMP/srv5.log")" = 1 ] &&
	grep -q "ring: $IF: verbs backend unavailable (cannot create the raw packet queue pair (needs CAP_NET_RAW): Operation not permitted); using the xdp backend" "$TMP/srv5.log"
check $? "qp refused: exactly one warning, naming the interface, the reason and the fallback"
[ $((after - before)) -eq 0 ]; check $? "qp refused: still offloaded (xdp), kernel Udp InDatagrams flat"

# 5. No device for the interface: one warning, xdp.
$B $VERBS VMA_RING_BACKEND=verbs VMA_TRACELEVEL=warn SOFTVERBS_NETDEVS=none0 python3 -c "$SRV" 13005 10 "$TMP/up6" >"$TMP/srv6.log" 2>&1 &
srv=$!
wait_file "$TMP/up6"; sleep 0.3
$A timeout 30 python3 -c "$CLI" 13005; check $? "no device: datagrams echoed intact"
wait $srv
[ "$(grep -c 'WARNING' "$TMP/srv6.log")" = 1 ] &&
	grep -q "ring: $IF: verbs backend unavailable (no RDMA device); using the xdp backend" "$TMP/srv6.log"
check $? "no device: exactly one warning"

# 6. auto: verbs where softverbs serves the interface; default: xdp only.
$B $VERBS VMA_RING_BACKEND=auto VMA_TRACELEVEL=debug python3 -c "$SRV" 13006 10 "$TMP/up7" >"$TMP/srv7.log" 2>&1 &
srv=$!
wait_file "$TMP/up7"; sleep 0.3
$A timeout 30 python3 -c "$CLI" 13006; check $? "auto: datagrams echoed intact"
wait $srv
grep -q "verbs ring on sv_$IF" "$TMP/srv7.log" && ! grep -q "WARNING: ring" "$TMP/srv7.log"; check $? "auto: a verbs ring, no warning"
$B $VERBS VMA_TRACELEVEL=debug python3 -c "$SRV" 13007 10 "$TMP/up8" >"$TMP/srv8.log" 2>&1 &
srv=$!
wait_file "$TMP/up8"; sleep 0.3
$B nft list tables 2>/dev/null | grep -q softverbs_; nft_rc=$?
$A timeout 30 python3 -c "$CLI" 13007; check $? "default: datagrams echoed intact"
wait $srv
[ $nft_rc != 0 ] && ! grep -q "verbs ring" "$TMP/srv8.log" && ! grep -q "softverbs: pid" "$TMP/srv8.log"
check $? "default (xdp): no verbs device opened, no softverbs table"

exit $fail

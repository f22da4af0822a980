#!/bin/bash
# Offloaded TCP end to end on a private two-namespace testbed (root).
# Usage: tcp_offload.sh [builddir | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Checks, in the three pairings (kernel server <-> libvma client, libvma
# server <-> kernel client, libvma <-> libvma): 4 MiB echoed with sha256
# equal, getsockname/getpeername on both ends agreeing, the libvma
# namespace's kernel TcpInSegs flat during the transfer (proof of offload).
# Then: refused connect (blocking ECONNREFUSED; non-blocking EINPROGRESS,
# poll OUT|ERR|HUP, SO_ERROR), a libvma listener on 0.0.0.0 accepting both
# an offloaded and a loopback (kernel) connection, and EOF/EPIPE after the
# peer closes; a kernel server's connection that goes on when a libvma
# server listens on its port (SO_REUSEPORT), and a listen() the kernel
# refuses after our steering was in (EADDRINUSE, the next one offloaded).
set -u
LIB=${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}
[ -d "$LIB" ] && LIB=$LIB/src/vma/.libs/libvma.so
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
LIB=$(readlink -f "$LIB")
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_PREFIX=tso
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null 2>&1 || { echo "SKIP: testbed"; exit 77; }
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT
A="nsenter --net=/run/netns/tso-a"
B="nsenter --net=/run/netns/tso-b"
# wait_listen NS PORT: until a socket listens on PORT in that namespace (a
# python3 started under libvma on a loaded machine takes seconds, not one).
wait_listen() {
	local i
	for i in $(seq 150); do
		[ -n "$($1 ss -Hltn "sport = :$2" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	return 1
}
# veth hands kernel segments over with CHECKSUM_PARTIAL (no checksum in the
# frame); XDP sees them as they are and our stack would drop them.
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
$A ethtool -K tso-a0 tx off >/dev/null 2>&1
$B ethtool -K tso-b0 tx off >/dev/null 2>&1
# TCP_OFFLOAD_PRELOAD (e.g. the ASan runtime) goes before the library.
VMA="env LD_PRELOAD=${TCP_OFFLOAD_PRELOAD:+$TCP_OFFLOAD_PRELOAD:}$LIB VMA_TRACELEVEL=2"
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
tcp_in() { $1 awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp; }   # InSegs
BYTES=$((4 * 1024 * 1024))
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT

# Echo server: one connection, echoes until EOF, prints its view of the
# addresses and the sha256 of what it received.
SRV='
import socket,sys,hashlib
ip,port=sys.argv[1],int(sys.argv[2])
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind((ip,port)); s.listen(8); s.settimeout(30)
c,a=s.accept(); c.settimeout(30)
names=c.getsockname()+c.getpeername()
h=hashlib.sha256()
while True:
  d=c.recv(262144)
  if not d: break
  h.update(d); c.sendall(d)
print("server local=%s:%d peer=%s:%d accept=%s:%d sha=%s" % (names+a+(h.hexdigest(),)))
c.close(); s.close()
'
# Client: sends BYTES random bytes from a thread, reads the echo, compares.
CLI='
import socket,sys,os,hashlib,threading
ip,port,n=sys.argv[1],int(sys.argv[2]),int(sys.argv[3])
data=os.urandom(n)
s=socket.create_connection((ip,port),timeout=30)
names=s.getsockname()+s.getpeername()   # later the socket may be in TIME_WAIT: ENOTCONN
def tx():
  v=memoryview(data)
  for i in range(0,n,100000): s.sendall(v[i:i+100000])
  s.shutdown(socket.SHUT_WR)
t=threading.Thread(target=tx); t.start()
h=hashlib.sha256(); got=0
while True:
  d=s.recv(262144)
  if not d: break
  h.update(d); got+=len(d)
t.join()
print("client local=%s:%d peer=%s:%d" % names)
print("client sent=%s echo=%s bytes=%d" % (hashlib.sha256(data).hexdigest(), h.hexdigest(), got))
'
pairing() {  # $1 server ns, $2 server prefix, $3 client ns, $4 client prefix, $5 server ip, $6 port, $7 label, $8 ns to watch
	local before; before=$(tcp_in "$8")
	$1 $2 timeout 60 python3 -c "$SRV" "$5" "$6" >"$TMP/srv" 2>&1 & local srv=$!
	wait_listen "$1" "$6"
	$3 $4 timeout 60 python3 -c "$CLI" "$5" "$6" "$BYTES" >"$TMP/cli" 2>&1; local rc=$?
	wait $srv; local src=$?
	local after; after=$(tcp_in "$8")
	cat "$TMP/srv" "$TMP/cli" | grep -v "^VMA" | sed 's/^/    /'
	local sent echo ssha
	sent=$(sed -n 's/.*sent=\([0-9a-f]*\).*/\1/p' "$TMP/cli")
	echo=$(sed -n 's/.*echo=\([0-9a-f]*\).*/\1/p' "$TMP/cli")
	ssha=$(sed -n 's/.*sha=\([0-9a-f]*\).*/\1/p' "$TMP/srv")
	[ $rc = 0 ] && [ $src = 0 ] && [ -n "$sent" ] && [ "$sent" = "$echo" ] && [ "$sent" = "$ssha" ]
	check $? "$7: 4 MiB each way, sha256 equal on both ends"
	# The client's local address is the server's peer and vice versa.
	local cl cp sl sp
	cl=$(sed -n 's/^client local=\([^ ]*\).*/\1/p' "$TMP/cli"); cp=$(sed -n 's/.* peer=\([^ ]*\)$/\1/p' "$TMP/cli")
	sl=$(sed -n 's/^server local=\([^ ]*\).*/\1/p' "$TMP/srv"); sp=$(sed -n 's/.* peer=\([^ ]*\) accept.*/\1/p' "$TMP/srv")
	[ -n "$cl" ] && [ "$cl" = "$sp" ] && [ "$cp" = "$sl" ] && [ "$cp" = "$5:$6" ] && grep -q "accept=$cl " "$TMP/srv"
	check $? "$7: getsockname/getpeername/accept address agree ($cl -> $cp)"
	local delta=$((after - before))
	[ $delta -le 20 ]
	check $? "$7: kernel TcpInSegs in the libvma namespace flat (delta $delta for $((BYTES / 1448 * 2))+ segments)"
}
pairing "$A" "" "$B" "$VMA" 198.18.0.1 15001 "kernel server <- libvma client" "$B"
pairing "$B" "$VMA" "$A" "" 198.18.0.2 15002 "libvma server <- kernel client" "$B"
pairing "$B" "$VMA" "$A" "$VMA" 198.18.0.2 15003 "libvma server <- libvma client" "$A"
# Without busy polling every wait sleeps: the client's sending thread sleeps
# in poll(POLLOUT) while its receiving thread takes the ACKs that open the
# window off the ring, so only the lane's poll() wake-up (not the ring fd)
# can wake it.
pairing "$B" "$VMA VMA_SELECT_POLL=0 VMA_RX_POLL=0" "$A" "$VMA VMA_SELECT_POLL=0 VMA_RX_POLL=0" 198.18.0.2 15004 \
	"libvma server <- libvma client, no busy polling" "$A"

# Refused connects: blocking and non-blocking.
$B $VMA timeout 20 python3 - <<'PY'; check $? "refused: blocking ECONNREFUSED; non-blocking EINPROGRESS, poll OUT|ERR|HUP, SO_ERROR ECONNREFUSED"
import socket,errno,select,sys
ok=True
s=socket.socket()
try:
  s.connect(("198.18.0.1",15999)); print("connect succeeded?"); ok=False
except OSError as e:
  print("blocking:", errno.errorcode.get(e.errno)); ok&= e.errno==errno.ECONNREFUSED
s.close()
s=socket.socket(); s.setblocking(False)
r=s.connect_ex(("198.18.0.1",15999)); print("nonblocking connect:", errno.errorcode.get(r)); ok&= r==errno.EINPROGRESS
p=select.poll(); p.register(s, select.POLLIN|select.POLLOUT)
ev=p.poll(5000); bits=ev[0][1] if ev else 0
print("poll bits 0x%x" % bits)
want=select.POLLOUT|select.POLLERR|select.POLLHUP
ok&= (bits & want)==want
e=s.getsockopt(socket.SOL_SOCKET,socket.SO_ERROR); print("SO_ERROR", errno.errorcode.get(e)); ok&= e==errno.ECONNREFUSED
e=s.getsockopt(socket.SOL_SOCKET,socket.SO_ERROR); ok&= e==0
s.close()
sys.exit(0 if ok else 1)
PY

# One listener on 0.0.0.0: a connection through the ring (offloaded child)
# and one over loopback (accepted by the kernel socket), both served; then
# the peer's close gives EOF and a later send EPIPE.
$B $VMA timeout 30 python3 - 15010 <<'PY' & LSRV=$!
import socket,sys,signal
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)
s.bind(("0.0.0.0",int(sys.argv[1]))); s.listen(8); s.settimeout(20)
for i in range(2):
  c,a=s.accept()
  d=c.recv(100)
  c.sendall(b"hello "+d)
  eof=c.recv(100)
  print("peer", a[0], "eof", eof==b"", flush=True)
  c.close()
PY
wait_listen "$B" 15010
$A timeout 10 python3 -c '
import socket
s=socket.create_connection(("198.18.0.2",15010),timeout=5); s.sendall(b"ring"); print(s.recv(100)); s.close()' >"$TMP/ring" 2>&1
$B timeout 10 python3 -c '
import socket
s=socket.create_connection(("127.0.0.1",15010),timeout=5); s.sendall(b"loop"); print(s.recv(100)); s.close()' >"$TMP/loop" 2>&1
wait $LSRV; rc=$?
grep -q "hello ring" "$TMP/ring" && grep -q "hello loop" "$TMP/loop" && [ $rc = 0 ]
check $? "listener on 0.0.0.0: ring connection and loopback connection both served, EOF after peer close"

# A rolling restart: a kernel server (no libvma) serves a connection on a
# port, a libvma server then listens on the same port (SO_REUSEPORT), and
# the old connection goes on with the kernel (its segments are not taken by
# the new listener's steering: the XDP program leaves connections the kernel
# holds to it), while a new connection reaches the libvma server.
$B timeout 30 python3 - 15050 "$TMP/vma_up" <<'PY' >"$TMP/old_srv" 2>&1 & OSRV=$!
import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1)
s.bind(("0.0.0.0",int(sys.argv[1]))); s.listen(4); s.settimeout(20)
c,a=s.accept(); s.close(); c.settimeout(20); n=0
while True:
  d=c.recv(65536)
  if not d: break
  n+=len(d); c.sendall(d)
print("old server echoed", n)
PY
wait_listen "$B" 15050
$A timeout 30 python3 - 15050 "$TMP/vma_up" <<'PY' >"$TMP/old_cli" 2>&1 & OCLI=$!
import socket,sys,os,time,threading
port,flag=int(sys.argv[1]),sys.argv[2]
def echo(s,n):
  data=os.urandom(n); got=b""
  t=threading.Thread(target=s.sendall,args=(data,)); t.start()
  while len(got)<n:
    d=s.recv(65536)
    if not d: break
    got+=d
  t.join(); return got==data
s=socket.create_connection(("198.18.0.2",port),timeout=10)
ok1=echo(s,1000)
for i in range(200):
  if os.path.exists(flag): break
  time.sleep(0.1)
ok2=echo(s,300000); s.close()
n=socket.create_connection(("198.18.0.2",port),timeout=10); n.sendall(b"new")
print("old connection before", ok1, "after", ok2, "new connection:", n.recv(100).decode()); n.close()
PY
for i in $(seq 100); do [ -n "$($B ss -Htn state established "( sport = :15050 )")" ] && break; sleep 0.1; done
$B $VMA timeout 30 python3 - 15050 "$TMP/vma_up" <<'PY' >"$TMP/new_srv" 2>&1
import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1)
s.bind(("0.0.0.0",int(sys.argv[1]))); s.listen(4); s.settimeout(20)
open(sys.argv[2],"w").close()
c,a=s.accept(); d=c.recv(100); c.sendall(b"vma "+d); c.close()
PY
wait $OCLI; wait $OSRV
# The verbs backend's NIC rules cannot leave the kernel's connection alone:
# there the new listener stays with the kernel, with a warning; on xdp it is
# offloaded, no warning.
warned=0
grep -q "has connections the kernel serves" "$TMP/new_srv" && warned=1
want_warn=0
[ "${VMA_RING_BACKEND:-}" = verbs ] && want_warn=1
grep -q "before True after True new connection: vma new" "$TMP/old_cli" && grep -q "old server echoed 301000" "$TMP/old_srv" &&
	[ $warned = $want_warn ]
check $? "rolling restart (SO_REUSEPORT): the kernel server's connection goes on after a libvma server listens on its port, a new one reaches libvma, warning $warned ($(cat "$TMP/old_cli" "$TMP/old_srv" | grep -v "^VMA" | tr '\n' ' '))"

# listen() refused by the kernel after our steering was in (a kernel
# process listens first on the port both bound with SO_REUSEADDR): the
# call fails with EADDRINUSE and leaves the socket as it was, so its next
# listen(), once the port is free, is offloaded (the connection it accepts
# is no kernel connection).
FLAGS=$TMP/flags; mkdir -p "$FLAGS"
waitflag='
import os,time,sys
def wait(f):
  for i in range(300):
    if os.path.exists(sys.argv[1]+"/"+f): return
    time.sleep(0.05)
  raise SystemExit("no "+f)
def flag(f): open(sys.argv[1]+"/"+f,"w").close()
'
$B timeout 30 python3 -c "$waitflag"'
import socket
k=socket.socket(); k.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); k.bind(("198.18.0.2",15060)); flag("bound")
wait("vbound"); k.listen(4); flag("klisten"); wait("vtried"); k.close(); flag("kclosed")' "$FLAGS" &
KLIS=$!
$B $VMA timeout 30 python3 -c "$waitflag"'
import socket,errno
wait("bound")
v=socket.socket(); v.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); v.bind(("198.18.0.2",15060)); flag("vbound")
wait("klisten")
try: v.listen(4); r="listened"
except OSError as e: r=errno.errorcode.get(e.errno)
flag("vtried"); wait("kclosed")
v.listen(4); flag("vlisten")
c,a=v.accept(); d=c.recv(10); c.sendall(b"ok "+d)
print("first listen:", r, "then accepted:", d.decode(), flush=True)
wait("checked"); c.close()' "$FLAGS" >"$TMP/relisten" 2>&1 &
VLIS=$!
$A timeout 30 python3 -c "$waitflag"'
import socket
wait("vlisten")
s=socket.create_connection(("198.18.0.2",15060),timeout=10); s.sendall(b"x"); print(s.recv(10)); s.close()' "$FLAGS" >/dev/null 2>&1
# the connection, still open on the server's side, is no kernel socket
kconns=$($B ss -Htn "( sport = :15060 )" | wc -l)
touch "$FLAGS/checked"
wait $VLIS; wait $KLIS
echo "kernel connections: $kconns" >>"$TMP/relisten"
grep -q "first listen: EADDRINUSE then accepted: x" "$TMP/relisten" && [ "$kconns" = 0 ]
check $? "listen refused by the kernel after our steering: EADDRINUSE, the socket unchanged, its next listen offloaded ($(grep -v "^VMA" "$TMP/relisten" | tr '\n' ' '))"

# EPIPE after the peer is gone; ECONNRESET from a peer's abortive close.
$A timeout 20 python3 -c '
import socket,struct,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("198.18.0.1",15020)); s.listen(4)
c,a=s.accept(); c.recv(10); c.close()
c,a=s.accept(); c.recv(10); c.setsockopt(socket.SOL_SOCKET,socket.SO_LINGER,struct.pack("ii",1,0)); c.close()
time.sleep(1)' & KSRV=$!
wait_listen "$A" 15020
$B $VMA timeout 20 python3 - <<'PY'; check $? "peer close: recv 0 then EPIPE on send; peer RST: ECONNRESET once, then 0"
import socket,errno,time,sys,signal
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
ok=True
s=socket.create_connection(("198.18.0.1",15020),timeout=5); s.sendall(b"x")
d=s.recv(10); print("recv after peer FIN:", d); ok&= d==b""
res=[]
for i in range(20):
  try: s.send(b"y"*1000)
  except OSError as e: res.append(e.errno); break
  time.sleep(0.05)
print("send after peer close:", [errno.errorcode.get(x) for x in res]); ok&= res in ([errno.EPIPE],[errno.ECONNRESET])
s.close()
s=socket.create_connection(("198.18.0.1",15020),timeout=5); s.sendall(b"x")
try:
  d=s.recv(10); print("recv after RST gave", d); ok=False
except OSError as e:
  print("recv after RST:", errno.errorcode.get(e.errno)); ok&= e.errno==errno.ECONNRESET
d=s.recv(10); print("second recv:", d); ok&= d==b""
s.close()
sys.exit(0 if ok else 1)
PY
wait $KSRV

# Exit with connections open: the peer gets every byte and a FIN (EOF, not
# ECONNRESET), for a normal exit and for terminating signals.
EXIT_SRV='
import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("198.18.0.1",int(sys.argv[1]))); s.listen(4)
s.settimeout(20); c,a=s.accept(); c.settimeout(20)
n=0
try:
  while True:
    d=c.recv(65536)
    if not d: print("EOF after", n); break
    n+=len(d)
except OSError as e: print("error", e.errno, "after", n)
'
EXIT_CLI='
import socket,sys,time
s=socket.create_connection(("198.18.0.1",int(sys.argv[1])),timeout=5)
s.sendall(b"z"*300000)
if sys.argv[2]=="sleep":
  print("ready",flush=True); time.sleep(30)
sys.exit(0)
'
$A timeout 30 python3 -c "$EXIT_SRV" 15030 >"$TMP/exit1" 2>&1 & ESRV=$!
wait_listen "$A" 15030
$B $VMA timeout 20 python3 -c "$EXIT_CLI" 15030 exit >/dev/null 2>&1
wait $ESRV
grep -q "EOF after 300000" "$TMP/exit1"
check $? "exit with an open connection: peer gets 300000 bytes then FIN ($(cat "$TMP/exit1"))"
# A terminating signal whose default action the application kept: libvma's
# handler closes the connection first whatever VMA_HANDLE_SIGINTR says
# (1 also covers applications with their own SIGINT/SIGTERM handler).
for exit_case in "1 TERM 15031" "0 TERM 15032" "0 HUP 15033"; do
	read -r sigintr sig eport <<<"$exit_case"
	$A timeout 30 python3 -c "$EXIT_SRV" $eport >"$TMP/exit2" 2>&1 & ESRV=$!
	wait_listen "$A" $eport
	rm -f "$TMP/exit2c"
	$B env VMA_HANDLE_SIGINTR=$sigintr $VMA timeout 40 python3 -c "$EXIT_CLI" $eport sleep >"$TMP/exit2c" 2>&1 & ECLI=$!
	for i in $(seq 50); do grep -q ready "$TMP/exit2c" 2>/dev/null && break; sleep 0.1; done
	kill -$sig $ECLI   # nsenter and env exec: this is timeout, which passes the signal on to python
	wait $ESRV; wait $ECLI 2>/dev/null
	grep -q "EOF after 300000" "$TMP/exit2"
	check $? "SIG$sig (VMA_HANDLE_SIGINTR=$sigintr) with an open connection: peer gets 300000 bytes then FIN ($(cat "$TMP/exit2"))"
done
# fork: the connection is handed to a kernel socket at fork (TCP_REPAIR,
# docs/process_model.md), so parent and child share it as without libvma:
# the child's 10 bytes and the parent's 2000 all arrive, in order.
$A timeout 20 python3 -c '
import socket
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(("198.18.0.1",15040)); s.listen(4)
s.settimeout(15); c,a=s.accept(); n=0
while True:
  d=c.recv(65536)
  if not d: break
  n+=len(d)
print("server got",n)' >"$TMP/fork_srv" 2>&1 & FSRV=$!
sleep 0.5
$B $VMA timeout 20 python3 -c '
import socket,os,errno
s=socket.create_connection(("198.18.0.1",15040),timeout=5); s.sendall(b"p"*1000)
pid=os.fork()
if pid==0:
  s.settimeout(0); r=[]
  for f in (lambda: s.send(b"c"*10), lambda: s.recv(10, socket.MSG_DONTWAIT)):
    try: f(); r.append("ok")
    except OSError as e: r.append(errno.errorcode[e.errno])
  print("child", *r, flush=True); s.close(); os._exit(0)
_,st=os.waitpid(pid,0); s.sendall(b"q"*1000); s.close(); print("parent done, child status", st)' >"$TMP/fork_cli" 2>&1
wait $FSRV
grep -q "child ok EAGAIN" "$TMP/fork_cli" && grep -q "child status 0" "$TMP/fork_cli" && grep -q "server got 2010" "$TMP/fork_srv"
check $? "fork: the child sends on the inherited connection (recv EAGAIN), all 2010 bytes arrive ($(grep -h -E "child|server" "$TMP/fork_cli" "$TMP/fork_srv" | tr '\n' ' '))"
exit $fail

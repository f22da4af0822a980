#!/bin/bash
# Process and thread lifecycle with real offloaded sockets (root).
# Usage: life_udp.sh [build dir | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# VMA_TEST_PRELOAD (e.g. the ASan runtime) goes before the library in LD_PRELOAD.
# The server (tests/integration/life_udp, commands on stdin) runs under
# libvma in namespace vmalife-b; kernel peers in vmalife-a. Checks:
#  1 fork: the child exits / execs /bin/true / uses a socket of its own;
#    afterwards the parent still receives offloaded (server Udp InDatagrams
#    flat) and the XDP program stays attached until the parent exits
#  2 a second process on the same interface: offloaded too (it joins the
#    same vmad domain, docs/process_model.md), no warning, both work
#  3 exit leaves no /tmp/vmastat.<pid>, and vmad removes the program and its
#    pin after its linger (2 s): normal exit, SIGINT and SIGTERM with
#    VMA_HANDLE_SIGINTR=1 (the app's own SIGINT handler still runs); with 0
#    a signal, and kill -9: vmad takes the dead process's port back, the
#    next start on that port is offloaded
#  4 the internal thread drains a ring nobody polls (2 s unread, 2000 datagrams)
#  5 VMA_INTERNAL_THREAD_AFFINITY=0 puts vma-internal on CPU 0
#  6 an address added while running: datagrams to it arrive, no crash
set -u
LIB=${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}
BUILD=""
if [ -d "$LIB" ]; then BUILD=$(readlink -f "$LIB"); LIB=$LIB/src/vma/.libs/libvma.so; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
LIB=$(readlink -f "$LIB")
[ -n "$BUILD" ] || BUILD=$(readlink -f "$(dirname "$LIB")/../../..")
HELPER=$BUILD/tests/integration/life_udp
[ -x "$HELPER" ] || { echo "SKIP: no $HELPER (make check builds it)"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
export TB_PREFIX=vmalife
IF=vmalife-b0
WORK=$(mktemp -d /tmp/life_udp.XXXXXX)
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
cleanup() {
	for p in $(jobs -p); do kill -9 "$p" 2>/dev/null; done
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	rm -rf "$WORK"
}
trap cleanup EXIT
A="nsenter --net=/run/netns/vmalife-a"
B="nsenter --net=/run/netns/vmalife-b"
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
udp_in() { $B awk '/^Udp:/{n++; if(n==2) print $2}' /proc/net/snmp; }
xdp_on() { $B ip -d link show "$IF" | grep -q 'prog/xdp\|xdp '; }
pins() { ls /sys/fs/bpf/vma/$IF 2>/dev/null | tr '\n' ' '; }
# The steering that must outlive a child and a second process: the XDP
# program, or on the verbs backend (rules on the QPs, no program) that no
# program appeared.
if [ "${VMA_RING_BACKEND:-}" = verbs ]; then
	STEER="verbs rules, no XDP program"
	steering_kept() { ! xdp_on; }
else
	STEER="XDP program attached"
	steering_kept() { xdp_on; }
fi

# A kernel client in namespace a: sends N datagrams to IP:PORT, prints how
# many echoes came back (echo=0: just send).
SENDER='
import socket,sys,time
ip,port,n,echo=sys.argv[1],int(sys.argv[2]),int(sys.argv[3]),int(sys.argv[4])
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET,socket.SO_RCVBUF,4<<20)
for i in range(n):
  s.sendto(b"x%05d"%i+b"y"*58,(ip,port))
  if i%50==49: time.sleep(0.002)
got=0
s.settimeout(2)
try:
  while echo and got<n:
    s.recv(100); got+=1
except socket.timeout: pass
print(got)
'
send() { $A timeout 20 python3 -c "$SENDER" "$@"; }

# A kernel echo peer in namespace a for the child's own socket.
$A python3 -c '
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.bind(("198.18.0.1",13999))
while True:
  d,a=s.recvfrom(100); s.sendto(d,a)
' & 

# start NAME PORT [VAR=value...]: a server with stdin/stdout on fifos;
# sets ${NAME}_PID, ${NAME}_IN, ${NAME}_OUT; its stderr goes to $WORK/NAME.err.
start() {
	local name=$1 port=$2; shift 2
	mkfifo "$WORK/$name.in" "$WORK/$name.out"
	$B env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_TRACELEVEL=3 "$@" "$HELPER" "$port" \
		<"$WORK/$name.in" >"$WORK/$name.out" 2>"$WORK/$name.err" &
	local in out
	exec {in}>"$WORK/$name.in" {out}<"$WORK/$name.out"
	eval "${name}_IN=$in ${name}_OUT=$out"
	local line=""
	read -r -t 20 line <&"$out"
	eval "${name}_PID=${line#ready }"
	[ "${line%% *}" = ready ]
}
# cmd NAME COMMAND...: prints the reply line
cmd() {
	local name=$1; shift
	local in out line=""
	eval "in=\$${name}_IN out=\$${name}_OUT"
	echo "$*" >&"$in"
	read -r -t 30 line <&"$out"
	echo "$line"
}
# stop NAME: closes the fifos, waits for the process, returns its status
stop() {
	local name=$1 in out pid
	eval "in=\$${name}_IN out=\$${name}_OUT pid=\$${name}_PID"
	exec {in}>&- {out}<&-
	local st=0
	# The job's pid is the helper's own (nsenter and env exec it).
	wait "$pid" 2>/dev/null; st=$?
	rm -f "$WORK/$name.in" "$WORK/$name.out"
	return $st
}
# offloaded NAME PORT LABEL: 200 datagrams echoed, server's kernel counter flat
offloaded() {
	local before after got reply
	before=$(udp_in)
	echo "recv 200 3000" >&"$(eval echo \$${1}_IN)"
	got=$(send 198.18.0.2 "$2" 200 1)
	read -r -t 30 reply <&"$(eval echo \$${1}_OUT)"
	after=$(udp_in)
	[ "$reply" = "recv 200" ] && [ "$got" = 200 ] && [ $((after - before)) -le 2 ]
	check $? "$3: 200/200 echoed ($reply, client got $got), Udp InDatagrams delta $((after - before))"
}
no_leftovers() {  # PID LABEL: the program is vmad's, gone after its linger
	local p i=0
	while [ $i -lt 50 ] && { xdp_on || [ -n "$(pins)" ]; }; do sleep 0.1; i=$((i + 1)); done
	p=$(pins)
	! xdp_on && [ -z "$p" ] && [ ! -e /tmp/vmastat.$1 ]
	check $? "$2: no xdp on $IF, no pins under /sys/fs/bpf/vma/$IF ($p), no /tmp/vmastat.$1"
}

echo "== 1. fork"
start srv 14001 || { echo "FAIL: server did not start"; cat "$WORK/srv.err"; exit 1; }
offloaded srv 14001 "before any fork"
steering_kept; check $? "$STEER on $IF while the server runs"
for kind in none exec sock; do
	reply=$(cmd srv fork $kind 198.18.0.1 13999)
	child=${reply##* }
	case $kind in none) what="child exits";; exec) what="child execs /bin/true";; sock) what="child uses its own new UDP socket";; esac
	[ "${reply% pid *}" = "fork $kind status 0" ]; check $? "$what: exit status 0 ($reply)"
	offloaded srv 14001 "after '$what' the parent still receives offloaded"
	steering_kept; check $? "after '$what': $STEER"
	[ ! -e /tmp/vmastat.$child ]; check $? "after '$what' no /tmp/vmastat.$child of the child left"
done
grep -i "fork" "$WORK/srv.err" | sed 's/^/  srv: /' | head -5

echo "== 2. a second process on the same interface"
start two 14002 || echo "FAIL: second server did not start"
before=$(udp_in)
echo "recv 50 3000" >&"$two_IN"; got=$(send 198.18.0.2 14002 50 1); read -r -t 30 reply <&"$two_OUT"
after=$(udp_in)
[ "$reply" = "recv 50" ] && [ "$got" = 50 ] && [ $((after - before)) -le 2 ]
check $? "second process offloaded too ($reply, client got $got, Udp InDatagrams delta $((after - before)))"
offloaded srv 14001 "first process still offloaded while the second runs"
nwarn=$(grep -c "WARN" "$WORK/two.err")
grep "WARN" "$WORK/two.err" | sed 's/^/  two: /'
[ "$nwarn" = 0 ]; check $? "second process: no warning (got $nwarn)"
cmd two quit >/dev/null; stop two; check $? "second process exits 0"
steering_kept; check $? "after the second process's exit: $STEER"
offloaded srv 14001 "first process still offloaded after the second exited"

echo "== 4. the internal thread drains a ring nobody polls"
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
before=$(udp_in)
echo "sleep 2000" >&"$srv_IN"
sent=$(send 198.18.0.2 14001 2000 0)
read -r -t 30 reply <&"$srv_OUT"
reply=$(cmd srv count)
after=$(udp_in)
n=$(echo "$reply" | cut -d' ' -f2)
[ "$n" = 2000 ] && [ $((after - before)) -le 2 ]
check $? "2000 datagrams sent while the app slept 2 s: $reply queued, Udp InDatagrams delta $((after - before))"
if [ -x "$VMA_STATS" ]; then
	stats=$($VMA_STATS -p "$srv_PID" -v 3 -c 1 2>&1)
	echo "$stats" | grep -iE "drop|ring" | sed 's/^/  vma_stats: /' | head -8
	drops=$(echo "$stats" | grep -oiE "drop[a-z]* *:? *[0-9]+" | grep -oE '[0-9]+$' | awk '{s+=$1} END{print s+0}')
	ndrop=$(echo "$stats" | grep -oiE "drop[a-z]* *:? *[0-9]+" | wc -l)
	[ "$ndrop" -gt 0 ] && [ "$drops" = 0 ]; check $? "vma_stats -v 3: all $ndrop drop counters 0 (sum $drops)"
fi

echo "== 5. internal thread affinity"
start aff 14005 VMA_INTERNAL_THREAD_AFFINITY=0 || echo "FAIL: affinity server did not start"
tid=$(cmd aff tid); tid=${tid#tid }
cpus=$(awk '/Cpus_allowed_list/{print $2}' /proc/$aff_PID/task/$tid/status 2>/dev/null)
main_cpus=$(awk '/Cpus_allowed_list/{print $2}' /proc/$aff_PID/status)
[ "$tid" != 0 ] && [ "$cpus" = 0 ]
check $? "vma-internal (tid $tid) Cpus_allowed_list=$cpus (main thread: $main_cpus)"
cmd aff quit >/dev/null; stop aff

echo "== 6. netlink: an address added while the server runs"
$B ip addr add 198.18.0.3/24 dev $IF
sleep 0.5
echo "recv 20 3000" >&"$srv_IN"; got=$(send 198.18.0.3 14001 20 1); read -r -t 30 reply <&"$srv_OUT"
[ "$reply" = "recv 20" ] && [ "$got" = 20 ]; check $? "datagrams to the new 198.18.0.3 arrive ($reply, echoes $got)"
offloaded srv 14001 "198.18.0.2 still offloaded after the address change"
$B ip addr del 198.18.0.3/24 dev $IF

echo "== 3. exit leaves nothing"
pid=$srv_PID
reply=$(cmd srv quit); stop srv; st=$?
[ "$reply" = bye ] && [ $st = 0 ]; check $? "normal exit status $st"
no_leftovers "$pid" "normal exit"

for sig in INT TERM; do
	start s$sig 14003 VMA_HANDLE_SIGINTR=1 || echo "FAIL: server did not start"
	offloaded s$sig 14003 "VMA_HANDLE_SIGINTR=1 server (for SIG$sig)"
	pid=$(eval echo \$s${sig}_PID)
	[ $sig = INT ] && cmd s$sig handler >/dev/null
	kill -$sig "$pid"
	out=""
	[ $sig = INT ] && read -r -t 10 out <&"$(eval echo \$s${sig}_OUT)"
	stop s$sig; st=$?
	if [ $sig = INT ]; then
		[ "$out" = app-handler ] && [ $st = 3 ]; check $? "SIGINT: the application's handler ran after libvma's cleanup (printed '$out', status $st)"
	else
		[ $st = $((128 + 15)) ]; check $? "SIGTERM: default action kept (status $st)"
	fi
	no_leftovers "$pid" "VMA_HANDLE_SIGINTR=1, SIG$sig"
done

echo "== 3b. VMA_HANDLE_SIGINTR=0 / kill -9: vmad reclaims, the next start gets the port"
for sig in INT KILL; do
	start z$sig 14004 VMA_HANDLE_SIGINTR=0 || echo "FAIL: server did not start"
	offloaded z$sig 14004 "VMA_HANDLE_SIGINTR=0 server"
	pid=$(eval echo \$z${sig}_PID)
	cmd z$sig dflint >/dev/null
	kill -$sig "$pid"; stop z$sig; st=$?
	[ $sig = INT ] && { [ $st = 130 ]; check $? "VMA_HANDLE_SIGINTR=0: SIGINT ends the process (status $st)"; }
	start next 14004 || echo "FAIL: server did not start"
	offloaded next 14004 "the next start after SIG$sig works offloaded (vmad took the port back)"
	npid=$next_PID
	cmd next quit >/dev/null; stop next
	no_leftovers "$npid" "after the next start's normal exit"
	rm -f /tmp/vmastat.$pid
done

for f in "$WORK"/*.err; do
	grep -qiE "runtime error|AddressSanitizer|Segmentation" "$f" && { echo "FAIL: $(basename "$f"):"; cat "$f"; fail=1; }
done
exit $fail

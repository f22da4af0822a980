#!/bin/bash
# One ring, many readers: threads blocked in recvfrom()/recv() on sockets of
# one lane (the default VMA_RING_ALLOCATION_LOGIC_RX=0) are woken for their
# own messages, not all at once, and never wait when the reader that watched
# the ring leaves (docs/process_model.md, "One ring, many readers").
# Usage: tests/integration/udp_readers.sh BUILDDIR   exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/udp_readers runs under libvma in RDR-b: 4 threads, each
# with its own UDP socket (ports PORT..PORT+3), each in blocking recvfrom();
# in the TCP cases each thread accepts one connection on its own port and
# loops on blocking recv(). Every answer carries the thread's voluntary
# context switches (its sleeps). The internal thread does not drain rings
# (VMA_PROGRESS_ENGINE_INTERVAL=0), so only the readers move packets off
# the ring. A kernel client in RDR-a:
#   1. wake-ups: 300 messages, one at a time, each to a random one of the 4
#      readers; the readers' sleeps per message are counted. Only with
#      VMA_RX_POLL=0 (every wait sleeps): one watcher sleeps on the ring and
#      the others on their socket, so a message wakes the watcher and its
#      reader (2), where every sleeper on the ring's wait fd woke (4) before.
#      Must be at most 3.
#   2. a leaving watcher: 6 rounds, 0.45 s apart, of one message to each
#      reader in turn (a rotating order) who then stays away from its
#      receive for 300 ms; whichever reader watched the ring leaves in each
#      round and one that slept on its socket must watch next (else a
#      message for it waits for the 100 ms cap of such a sleep). Every
#      answer within 40 ms.
#   3. each thread gets "q" and ends; the server exits 0.
# Every answer must name its message and the reader's thread, and the
# server namespace's kernel Udp InDatagrams (Tcp InSegs) must stay flat.
# Each protocol runs sleeping (VMA_RX_POLL=0) and polling (the defaults: 2
# permits to spin on this 2-core host, so spinners watch the ring too;
# step 1's bound is then not checked, as spinning readers sleep less).
set -u
BUILD=${1:?usage: udp_readers.sh BUILDDIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BUILD=$(cd "$BUILD" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
HELPER=$BUILD/tests/integration/udp_readers
[ -e "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
[ -x "$HELPER" ] || make -C "$BUILD" -s tests/integration/udp_readers >/dev/null 2>&1
[ -x "$HELPER" ] || { echo "SKIP: no $HELPER (make check builds it)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: needs python3"; exit 77; }
TB_PREFIX_OVERRIDE=${RDR_TB_PREFIX:-}
. "$(dirname "$0")/pair_lib.sh"
pair_up vmardr udp_readers
# kernel_in udp|tcp: Udp InDatagrams or Tcp InSegs of the server namespace
kernel_in() {
	if [ "$1" = udp ]; then snmp Udp: 2; else snmp Tcp: 11; fi
}

# The kernel client: prints "wakes W messages D", "away max_ms M", "bad B
# lost L" (B: answers naming another message or thread; L: no answer in 1 s).
CLIENT='
import random,socket,sys,time
base,n,tcp=int(sys.argv[1]),int(sys.argv[2]),sys.argv[3]=="tcp"
if tcp:
    conns=[socket.create_connection(("198.18.0.2",base+t),timeout=5) for t in range(n)]
    for c in conns: c.settimeout(1.0)
else:
    s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
    s.settimeout(1.0)
seq=[0]; bad=[0]; lost=[0]; nvcsw={}
def answer(t):
    if not tcp: return s.recv(256)
    d=b""
    while len(d)<48:
        part=conns[t].recv(48-len(d))
        if not part: raise socket.timeout()
        d+=part
    return d
def ask(t,mode):
    seq[0]+=1; k=seq[0]
    t0=time.monotonic()
    m=b"%d %s"%(k,mode.encode())
    if tcp: conns[t].sendall(m.ljust(32))
    else: s.sendto(m,("198.18.0.2",base+t))
    while True:
        try: d=answer(t)
        except socket.timeout:
            lost[0]+=1; return None
        f=d.split()
        if len(f)!=3: bad[0]+=1; continue
        if int(f[0])<k: continue     # a late answer to a lost one
        if int(f[0])!=k or int(f[1])!=t: bad[0]+=1; return None
        nvcsw[t]=int(f[2]); return (time.monotonic()-t0)*1000
def all_ports(mode):
    for t in range(n): ask(t,mode)
random.seed(7)
all_ports("e"); time.sleep(0.2)
all_ports("e"); first=dict(nvcsw)
m=300
for i in range(m): ask(random.randrange(n),"e")
all_ports("e")
print("wakes %d messages %d"%(sum(nvcsw[t]-first[t] for t in range(n)),m+n))
worst=0.0
for r in range(6):
    time.sleep(0.45)
    for j in range(n):
        ms=ask((r+j)%n,"a")
        if ms is not None: worst=max(worst,ms)
print("away max_ms %.1f"%worst)
time.sleep(0.45)
all_ports("q")
print("bad %d lost %d"%(bad[0],lost[0]))
'

# run_case LABEL udp|tcp CHECK_WAKES(1|0) [VAR=VALUE...]
run_case() {
	local label=$1 proto=$2 check_wakes=$3 port=$((20000 + RANDOM % 20000)) line="" i
	shift 3
	echo "== $label: $*"
	: >"$WORK/srv.out"
	$B env LD_PRELOAD="${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB" VMA_PROGRESS_ENGINE_INTERVAL=0 "$@" \
		"$HELPER" "$port" 4 $([ "$proto" = tcp ] && echo tcp) >"$WORK/srv.out" 2>"$WORK/srv.err" &
	SRV=$!
	for i in $(seq 100); do grep -q '^ready' "$WORK/srv.out" && break; sleep 0.1; done
	if ! grep -q '^ready' "$WORK/srv.out"; then
		check 1 "$label: the server starts"; sed 's/^/  srv: /' "$WORK/srv.err" | tail -5
		kill -9 "$SRV" 2>/dev/null; wait "$SRV" 2>/dev/null; SRV=""
		return
	fi
	local before after out rc
	before=$(kernel_in "$proto")
	out=$($A timeout 60 python3 -c "$CLIENT" "$port" 4 "$proto" 2>&1)
	after=$(kernel_in "$proto")
	echo "$out" | sed 's/^/  client: /'
	for i in $(seq 50); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$SRV" 2>/dev/null; then
		kill -9 "$SRV"; wait "$SRV" 2>/dev/null; rc=137
	else
		wait "$SRV"; rc=$?
	fi
	SRV=""
	sed 's/^/  srv: /' "$WORK/srv.err" | grep -v "^  srv: *$\|VMA INFO" | tail -5
	check $(( rc != 0 )) "$label: every reader ended, the server exited 0 (exit $rc)"
	check $(( $(echo "$out" | grep -c '^bad 0 lost 0$') != 1 )) "$label: every message answered by its reader"
	local wakes dgrams worst
	read -r wakes dgrams < <(echo "$out" | awk '/^wakes/{print $2, $4}')
	worst=$(echo "$out" | awk '/^away/{print $3}')
	if [ "$check_wakes" = 1 ]; then
		check $(( ${wakes:-0} == 0 || ${wakes:-0} * 10 > ${dgrams:-1} * 30 )) \
			"$label: a message wakes at most 3 readers ($wakes sleeps for $dgrams messages)"
	else
		echo "  (sleeps: $wakes for $dgrams messages, not checked while readers poll)"
	fi
	check $(awk -v w="${worst:-999}" 'BEGIN{print (w < 40) ? 0 : 1}') \
		"$label: after a watcher leaves, the next message is read at once (worst ${worst:-?} ms < 40)"
	check $(( after - before > 20 )) "$label: the kernel's $proto counter flat ($before -> $after)"
}

run_case "udp, sleeping" udp 1 VMA_RX_POLL=0
run_case "udp, polling" udp 0
run_case "tcp, sleeping" tcp 1 VMA_RX_POLL=0
run_case "tcp, polling" tcp 0
exit $fail

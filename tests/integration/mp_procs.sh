#!/bin/bash
# Many-process and many-thread servers under libvma (docs/process_model.md).
# Usage: mp_procs.sh BUILDDIR      exit 0 pass, 1 fail, 77 skip (needs root).
#
# Testbed TB_PREFIX=mpp: mp_server runs in mpp-b (198.18.0.2) under
# LD_PRELOAD=libvma, mp_client in mpp-a (198.18.0.1) on the kernel.
# Scenarios:
#   a. prefork, 4 workers: 8 conns x 2000 requests, then 400 connections of
#      one request each (--reconnect); every worker accepted some (SIGUSR1
#      snapshot); kernel Tcp InSegs of the server namespace grew by less than
#      10% of the segments the client sent (offloaded). Then one worker is
#      SIGKILLed and 8 conns x 500 requests must still all succeed; the client
#      may retry a refused or unanswered connect up to 3 times (the retries
#      are printed), the window in which flows of the dead worker are being
#      moved to the others. The server's totals must add up.
#   b. forkconn (a child per connection): 200 connections, --reconnect.
#   c. daemon (fork, setsid, fork after listen): pidfile, client, SIGTERM.
#   d. threads, 4 threads with EPOLLEXCLUSIVE on one listener.
#   e. udp-prefork, 2 workers: 4 UDP sockets x 1000 requests; kernel Udp
#      InDatagrams of the server namespace flat.
#   f. two unrelated `single` servers on two ports, both loaded at once;
#      kernel Tcp InSegs flat.
#   g. threads-reuseport, 4 threads each with its own SO_REUSEPORT listener,
#      VMA_RING_ALLOCATION_LOGIC_RX=20 (a ring per thread): 8 x 2000 requests
#      and 200 connections; every thread accepted some; vma_stats shows 4
#      rings of the process, each with received packets; Tcp InSegs flat.
#   h. udp-threads, 4 threads each with its own SO_REUSEPORT UDP socket,
#      ring per thread: 32 sockets x 200 requests; every thread answered
#      some; 4 rings with traffic; Udp InDatagrams flat.
#   j. prefork, 2 workers, 8 idle connections; one worker SIGKILLed: the
#      peers of its connections are told within 1 s (ECONNRESET from vmad's
#      probe; on verbs, from the share board's), the other worker's
#      connections still echo.
#   k. prefork, 2 workers, started as root with --user nobody (setuid
#      before any socket): offloaded all the same (Tcp InSegs flat).
#   l. threads, 4 threads on one listener, VMA_RING_ALLOCATION_LOGIC_RX=20:
#      each accepted connection moves to its accepting thread's lane; 8 x
#      2000 requests and 200 connections; vma_stats shows 4 rings or more,
#      each with received packets; every thread echoed some; Tcp InSegs flat.
#   m. threads-handoff: the main thread accepts and hands connections to 4
#      worker threads, VMA_RING_ALLOCATION_LOGIC_RX=20: each connection
#      follows its reader to the worker's lane; 4 rings or more with
#      traffic; every worker echoed some; Tcp InSegs flat.
#   n. threads-reuseport under the default ring logic (one lane): the 4
#      listeners share the lane's TCP engine, which spreads the SYNs over
#      them; 8 x 2000 requests and 200 connections; every thread accepted
#      some; Tcp InSegs flat.
#   o. udp-threads under the default ring logic: the 4 SO_REUSEPORT UDP
#      sockets of the lane's stack share the datagrams by flow (64 client
#      sockets x 100 requests); every thread answered some; Udp
#      InDatagrams flat.
#   i. udp-shared: the main thread's UDP socket read by 2 threads, ring per
#      thread: both readers use it (each answered some) wherever it is (it
#      stays in the main thread's lane while the two alternate, and moves to
#      a reader's lane if that one alone makes a whole window of
#      VMA_RING_MIGRATION_RATIO_RX reads); Udp InDatagrams flat.
# MP_QUEUES=N (1-16, default 1) gives the testbed's veths N queues: the
# client's kernel hashes each flow to one of them as RSS does, and every
# scenario must stay offloaded (each process and lane has an XSK on every
# queue); at the end every queue of the server's veth must have redirected
# packets to XSKs (veth's per-queue XDP counters). mp_queues.sh runs it so.
# Every run has a timeout; every server stops itself after --max-seconds;
# the EXIT trap kills whatever is left and removes the testbed.
# MP_KERNEL_ONLY=1 runs the servers on the kernel too and inverts the offload
# checks (the counters must grow): it shows the checks can fail, and tests
# this script while libvma's multi-process support is being written.
set -u
BUILD=${1:?usage: mp_procs.sh BUILDDIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BUILD=$(cd "$BUILD" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
TESTBED="$HERE/../../contrib/testbed.sh"
LIB=$BUILD/src/vma/.libs/libvma.so
SRV=$BUILD/tests/integration/mp_server
CLI=$BUILD/tests/integration/mp_client
KERNEL_ONLY=${MP_KERNEL_ONLY:-0}
SERVER_LIFE=80      # mp_server --max-seconds: stops itself even if we die
CLIENT_TIMEOUT=40   # per client run
START=$SECONDS

for p in mp_server mp_client; do
	[ -x "$BUILD/tests/integration/$p" ] || make -C "$BUILD" -s "tests/integration/$p" >/dev/null ||
		{ echo "FAIL: cannot build tests/integration/$p"; exit 1; }
done
[ "$KERNEL_ONLY" = 1 ] || [ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v nsenter >/dev/null || { echo "SKIP: no nsenter"; exit 77; }

export TB_PREFIX=${MP_TB_PREFIX:-mpp}
QUEUES=${MP_QUEUES:-1}
export TB_QUEUES=$QUEUES
TMP=$(mktemp -d /tmp/mpp.XXXXXX)
BG=""   # background jobs we started (timeout wrappers)

# Our server processes: pids read from pidfiles and "worker PID" lines. Only
# those are killed, and only while they still run our binary (a pid may have
# been reused since).
is_ours() { [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$SRV" ]; }
alive() { # running, not a zombie waiting for its reaper
	local st
	st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}
track() { echo "$1" >>"$TMP/pids"; }
kill_tracked() {
	local p f
	# A pidfile a server wrote before we saw its "ready" (interrupted start).
	for f in "$TMP"/*.pid; do [ -s "$f" ] && track "$(cat "$f")"; done
	[ -f "$TMP/pids" ] || return 0
	for p in $(sort -u "$TMP/pids"); do is_ours "$p" && kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local left=0
		for p in $(sort -u "$TMP/pids"); do is_ours "$p" && alive "$p" && left=1; done
		[ $left = 0 ] && break
		sleep 0.1
	done
	for p in $(sort -u "$TMP/pids"); do is_ours "$p" && kill -KILL "$p" 2>/dev/null; done
}
cleanup() {
	kill_tracked
	local j
	for j in $BG; do kill "$j" 2>/dev/null; done
	wait 2>/dev/null
	bash "$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'echo "interrupted"; exit 1' INT TERM

bash "$TESTBED" up pair >/dev/null || { echo "SKIP: testbed up pair failed"; exit 77; }
CLIENT_NS=/run/netns/$TB_PREFIX-a
SERVER_NS=/run/netns/$TB_PREFIX-b
SERVER_ADDR=198.18.0.2
if [ "$KERNEL_ONLY" = 1 ]; then
	VMA=""
	echo "mode: kernel only (servers on the kernel; offload checks inverted)"
else
	# VMA_TEST_PRELOAD: runtimes to load first (asan_offload.sh: the
	# sanitizers' own, which an uninstrumented program needs first).
	VMA="env LD_PRELOAD=${VMA_TEST_PRELOAD:+$VMA_TEST_PRELOAD:}$LIB"
	echo "mode: libvma $LIB"
fi

npass=0 nfail=0
check() {
	if [ "$1" = 0 ]; then echo "PASS: $2"; npass=$((npass + 1))
	else echo "FAIL: $2"; nfail=$((nfail + 1)); fi
}
# /proc/net/snmp: the second Tcp: line holds the values, InSegs $11 OutSegs
# $12; the second Udp: line, InDatagrams $2 OutDatagrams $5.
snmp() { nsenter --net="$1" awk -v t="$2" -v f="$3" '$1 == t {n++; if (n == 2) print $f}' /proc/net/snmp; }
tcp_in() { snmp "$1" Tcp: 11; }
tcp_out() { snmp "$1" Tcp: 12; }
udp_in() { snmp "$1" Udp: 2; }
udp_out() { snmp "$1" Udp: 5; }

# offload_check LABEL WHAT SERVER_GROWTH CLIENT_SENT: the server namespace's
# kernel counter grew by less than 10% of what the client sent (libvma took
# the packets), or, kernel-only, by at least that much.
offload_check() {
	local label=$1 what=$2 grew=$3 sent=$4 limit=$(($4 / 10))
	if [ "$KERNEL_ONLY" = 1 ]; then
		[ "$grew" -ge "$limit" ] && [ "$sent" -gt 0 ]
		check $? "$label: server on the kernel: $what grew by $grew >= $limit (10% of $sent sent; the offload check would catch it)"
	else
		[ "$grew" -lt "$limit" ]
		check $? "$label: server under libvma: kernel $what grew by $grew < $limit (10% of $sent sent)"
	fi
}

# start_server NAME ARGS...: mp_server in the server namespace; waits for
# its "ready" (and pidfile). Sets SPID (the pid to signal) and SJOB.
start_server() {
	local name=$1; shift
	local out=$TMP/$name
	timeout $((SERVER_LIFE + 10)) nsenter --net=$SERVER_NS $VMA "$SRV" --bind $SERVER_ADDR \
		--stats "$out.stats" --pidfile "$out.pid" --max-seconds $SERVER_LIFE "$@" \
		>"$out.out" 2>"$out.err" &
	SJOB=$! SPID=""
	BG="$BG $SJOB"
	local i
	for i in $(seq 100); do
		if grep -q '^ready' "$out.out" 2>/dev/null && [ -s "$out.pid" ]; then
			SPID=$(cat "$out.pid")
			track "$SPID"
			local w
			for w in $(awk '$1 == "worker" && NF == 2 {print $2}' "$out.out"); do track "$w"; done
			return 0
		fi
		sleep 0.1
	done
	check 1 "$name: server ready within 10 s"
	sed 's/^/   server stderr: /' "$out.err" | head -10
	[ -s "$out.pid" ] && track "$(cat "$out.pid")"
	kill_tracked
	return 1
}

# stop_server NAME: SIGTERM, then it must be gone within 5 s; sets SRC to
# the exit status when it is our child (not for the daemon).
stop_server() {
	local name=$1 pid
	pid=$(cat "$TMP/$name.pid")
	kill -TERM "$pid" 2>/dev/null
	local i gone=1
	for i in $(seq 50); do alive "$pid" || { gone=0; break; }; sleep 0.1; done
	check $gone "$name: server pid $pid exits on SIGTERM"
	[ $gone = 0 ] || kill -KILL "$pid" 2>/dev/null
}

# client NAME ARGS...: mp_client in the client namespace; 0 if it passed.
client() {
	local name=$1; shift
	timeout $CLIENT_TIMEOUT nsenter --net=$CLIENT_NS "$CLI" --server $SERVER_ADDR "$@" \
		>"$TMP/$name.cli" 2>"$TMP/$name.cli.err"
	local rc=$?
	sed 's/^/   /' "$TMP/$name.cli"
	[ $rc = 0 ] || sort "$TMP/$name.cli.err" | uniq -c | sort -rn | head -5 | sed 's/^/   client stderr: /'
	[ $rc = 124 ] && echo "   client timed out after ${CLIENT_TIMEOUT}s"
	return $rc
}

# The server's own messages and libvma's warnings; libvma's start-up
# banner (VMA INFO) only where it says which path the traffic takes.
show_server_errors() {
	[ -s "$TMP/$1.err" ] || return 0
	{ grep -v 'VMA INFO' "$TMP/$1.err"; grep -E 'VMA INFO: .*(kernel|offload)' "$TMP/$1.err"; } |
		sed 's/^mp_server\[[0-9]*\]: //' | sort | uniq -c | sort -rn | head -6 |
		sed 's/^/   server stderr: /'
}


# Sums a column of the final "worker ..." lines of a stats file.
stat_sum() { awk -v f="$2" '$1 == "worker" {s += $f} END {print s + 0}' "$TMP/$1.stats"; }

info_tcp() { echo "   info: server kernel Tcp InSegs +$1, client sent $2 segments"; }

# ---------------------------------------------------------------- a. prefork
scenario_a() {
	echo "== a. prefork, 4 workers"
	start_server a --port 18001 --model prefork --workers 4 || return
	local workers
	workers=$(awk '$1 == "worker" && NF == 2 {print $2}' "$TMP/a.out")
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client a1 --port 18001 --conns 8 --requests 2000
	check $? "a: 8 conns x 2000 requests all echoed intact"
	client a2 --port 18001 --conns 8 --requests 50 --reconnect
	check $? "a: 400 connections (--reconnect) all echoed intact"
	local grew=$(( $(tcp_in $SERVER_NS) - in0 )) sent=$(( $(tcp_out $CLIENT_NS) - out0 ))
	offload_check a "Tcp InSegs" $grew $sent

	# Every worker took a share: SIGUSR1 makes each print its counters.
	kill -USR1 "$SPID"
	local i
	for i in $(seq 30); do
		[ "$(grep -c '^snapshot worker' "$TMP/a.stats")" -ge 4 ] && break
		sleep 0.1
	done
	local shares zero
	shares=$(awk '$1 == "snapshot" {printf "%s%s:%s", sep, $3, $5; sep = " "}' "$TMP/a.stats")
	zero=$(awk '$1 == "snapshot" && $5 == 0' "$TMP/a.stats" | wc -l)
	[ "$(grep -c '^snapshot worker' "$TMP/a.stats")" = 4 ] && [ "$zero" = 0 ]
	check $? "a: every one of the 4 workers accepted connections (pid:accepted $shares)"

	# One worker dies; the others must take its connections.
	local victim
	victim=$(echo "$workers" | head -1)
	kill -KILL "$victim"
	for i in $(seq 50); do alive "$victim" || break; sleep 0.1; done
	! alive "$victim"; check $? "a: worker $victim killed with SIGKILL"
	sleep 0.2
	alive "$SPID"; check $? "a: master $SPID survives the loss of a worker"
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client a3 --port 18001 --conns 8 --requests 500 --connect-retries 3
	check $? "a: after the kill, 8 conns x 500 requests all echoed intact ($(awk '{print $NF}' "$TMP/a3.cli") connect retries, at most 3 per connection)"
	grew=$(( $(tcp_in $SERVER_NS) - in0 )) sent=$(( $(tcp_out $CLIENT_NS) - out0 ))
	offload_check "a (after the kill)" "Tcp InSegs" $grew $sent

	stop_server a
	sleep 0.2
	# Totals: the three survivors' final lines plus the victim's snapshot
	# (it served nothing between the snapshot and its death).
	local finals victim_req total want=$((16000 + 400 + 4000))
	finals=$(grep -c '^worker' "$TMP/a.stats")
	victim_req=$(awk -v v="$victim" '$1 == "snapshot" && $3 == v {print $7}' "$TMP/a.stats")
	total=$(( $(stat_sum a 6) + ${victim_req:-0} ))
	[ "$finals" = 3 ] && [ "$total" = $want ]
	check $? "a: 3 surviving workers reported at exit, requests echoed $total (want $want)"
	grep '^worker' "$TMP/a.stats" | sed 's/^/   /'
	show_server_errors a
}

# ---------------------------------------------------------------- b. forkconn
scenario_b() {
	echo "== b. forkconn (a child per connection)"
	start_server b --port 18002 --model forkconn || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client b1 --port 18002 --conns 8 --requests 25 --reconnect
	check $? "b: 200 connections (--reconnect) all echoed intact"
	info_tcp $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	stop_server b
	sleep 0.2
	local line
	line=$(grep '^worker' "$TMP/b.stats")
	[ "$(echo "$line" | awk '{print $4, $6}')" = "200 200" ]
	check $? "b: master accepted 200, its children echoed 200 (${line:-no stats line})"
	show_server_errors b
}

# ---------------------------------------------------------------- c. daemon
scenario_c() {
	echo "== c. daemon (fork, setsid, fork after listen)"
	start_server c --port 18003 --model daemon || return
	# The launching process exits at once; the daemon is another process.
	local i rc=1
	for i in $(seq 50); do
		kill -0 "$SJOB" 2>/dev/null || { wait "$SJOB"; rc=$?; break; }
		sleep 0.1
	done
	check $rc "c: the launching process exited 0 (exit $rc)"
	local sid
	sid=$(awk '{print $6}' "/proc/$SPID/stat" 2>/dev/null)
	[ "$sid" != "" ] && [ "$sid" != "$SPID" ] && is_ours "$SPID"
	check $? "c: daemon pid $SPID from the pidfile runs, in its own session $sid, not its leader"
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client c1 --port 18003 --conns 8 --requests 500
	check $? "c: 8 conns x 500 requests all echoed intact"
	info_tcp $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	stop_server c
	show_server_errors c
}

# ---------------------------------------------------------------- d. threads
scenario_d() {
	echo "== d. threads, 4 threads"
	start_server d --port 18004 --model threads --workers 4 || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client d1 --port 18004 --conns 8 --requests 2000
	check $? "d: 8 conns x 2000 requests all echoed intact"
	client d2 --port 18004 --conns 8 --requests 25 --reconnect
	check $? "d: 200 connections (--reconnect) all echoed intact"
	info_tcp $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	stop_server d
	sleep 0.2
	local lines
	lines=$(grep -c '^worker' "$TMP/d.stats")
	[ "$lines" = 4 ] && [ "$(stat_sum d 6)" = 16200 ]
	check $? "d: 4 threads reported, $(stat_sum d 6) requests echoed (want 16200)"
	grep '^worker' "$TMP/d.stats" | sed 's/^/   /'
	show_server_errors d
}

# ---------------------------------------------------------------- e. udp-prefork
scenario_e() {
	echo "== e. udp-prefork, 2 workers"
	start_server e --port 18005 --model udp-prefork --workers 2 || return
	local in0 out0
	in0=$(udp_in $SERVER_NS) out0=$(udp_out $CLIENT_NS)
	client e1 --port 18005 --udp --conns 4 --requests 1000
	check $? "e: 4 UDP sockets x 1000 requests all answered intact"
	offload_check e "Udp InDatagrams" $(( $(udp_in $SERVER_NS) - in0 )) $(( $(udp_out $CLIENT_NS) - out0 ))
	stop_server e
	sleep 0.2
	[ "$(grep -c '^worker' "$TMP/e.stats")" = 2 ] && [ "$(stat_sum e 6)" = 4000 ]
	check $? "e: 2 workers reported, $(stat_sum e 6) datagrams echoed (want 4000)"
	grep '^worker' "$TMP/e.stats" | sed 's/^/   /'
	show_server_errors e
}

# ---------------------------------------------------------------- f. two servers
scenario_f() {
	echo "== f. two unrelated single servers, ports 18006 and 18007, loaded at once"
	start_server f1 --port 18006 --model single || return
	start_server f2 --port 18007 --model single || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client f1 --port 18006 --conns 8 --requests 1000 &
	local j1=$!
	client f2 --port 18007 --conns 8 --requests 1000 &
	local j2=$!
	BG="$BG $j1 $j2"
	wait $j1; check $? "f: client of server 1 (port 18006): 8 conns x 1000 requests all echoed intact"
	wait $j2; check $? "f: client of server 2 (port 18007): 8 conns x 1000 requests all echoed intact"
	offload_check f "Tcp InSegs" $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	stop_server f1
	stop_server f2
	sleep 0.2
	[ "$(stat_sum f1 6)" = 8000 ] && [ "$(stat_sum f2 6)" = 8000 ]
	check $? "f: each server echoed its own 8000 requests ($(stat_sum f1 6), $(stat_sum f2 6))"
	show_server_errors f1
	show_server_errors f2
}

# ring_check NAME WANT: vma_stats of the server shows WANT rings or more,
# each with received packets (libvma only).
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
ring_check() {
	local name=$1 want=$2 pid rings busy
	[ "$KERNEL_ONLY" = 1 ] && return 0
	pid=$(cat "$TMP/$name.pid")
	# Each lane publishes its ring counters every 100 ms (a whole UDP
	# scenario can run in less): let every lane publish twice first.
	sleep 0.3
	"$VMA_STATS" -p "$pid" -v 3 -c 1 >"$TMP/$name.vs" 2>&1
	rings=$(grep -c 'RING=\[' "$TMP/$name.vs")
	# "Rx Offload: KB / PACKETS [kilobytes/packets]"
	busy=$(awk '/RING=\[/ {r = 1} r && /^Rx Offload:/ {if ($5 + 0 > 0) n++; r = 0} END {print n + 0}' "$TMP/$name.vs")
	[ "$rings" -ge "$want" ] && [ "$busy" -ge "$want" ]
	check $? "$name: vma_stats shows $rings rings of the process, $busy with received packets (want $want: one per thread)"
	awk '/RING=\[/ {r = $0; next} r != "" && /^Rx Offload:/ {print "   " r "  " $0; r = ""}' "$TMP/$name.vs"
}

# threads_done NAME THREADS FIELD TOTAL WHAT: stops the server; THREADS
# final worker lines, each with FIELD > 0 (4 accepted, 6 requests), whose
# requests add up to TOTAL.
threads_done() {
	local name=$1 threads=$2 field=$3 total=$4 what=$5
	stop_server "$name"
	sleep 0.2
	[ "$(grep -c '^worker' "$TMP/$name.stats")" = "$threads" ] && [ "$(stat_sum "$name" 6)" = "$total" ] &&
		awk -v f="$field" '$1 == "worker" {n++; if ($f + 0 > 0) ok++} END {exit !(n > 0 && n == ok)}' \
			"$TMP/$name.stats"
	check $? "$name: $threads threads reported, each $what some, $(stat_sum "$name" 6) requests (want $total)"
	grep '^worker' "$TMP/$name.stats" | sed 's/^/   /'
	show_server_errors "$name"
}

# udp_threads_scenario NAME MODEL THREADS PORT CONNS REQUESTS RINGS: a UDP
# server of MODEL with a ring per thread (LOGIC, default 20: the
# VMA_RING_ALLOCATION_LOGIC_RX); RINGS 0 skips the vma_stats check.
udp_threads_scenario() {
	local name=$1 model=$2 threads=$3 port=$4 conns=$5 requests=$6 rings=$7
	VMA_RING_ALLOCATION_LOGIC_RX=${LOGIC:-20} start_server "$name" --port "$port" --model "$model" --workers "$threads" ||
		return
	local in0 out0
	in0=$(udp_in $SERVER_NS) out0=$(udp_out $CLIENT_NS)
	client "${name}1" --port "$port" --udp --conns "$conns" --requests "$requests"
	check $? "$name: $conns UDP sockets x $requests requests all answered intact"
	offload_check "$name" "Udp InDatagrams" $(( $(udp_in $SERVER_NS) - in0 )) $(( $(udp_out $CLIENT_NS) - out0 ))
	[ "$rings" -gt 0 ] && ring_check "$name" "$rings"
	threads_done "$name" "$threads" 6 $((conns * requests)) answered
}

# ---------------------------------------------------------------- g. threads, SO_REUSEPORT each, ring per thread
# reuseport_scenario NAME PORT RINGS: threads-reuseport, 4 threads, under
# VMA_RING_ALLOCATION_LOGIC_RX=$LOGIC (default 20); RINGS 0 skips the
# vma_stats check.
reuseport_scenario() {
	local name=$1 port=$2 rings=$3
	VMA_RING_ALLOCATION_LOGIC_RX=${LOGIC:-20} start_server "$name" --port "$port" --model threads-reuseport \
		--workers 4 || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client "${name}1" --port "$port" --conns 8 --requests 2000
	check $? "$name: 8 conns x 2000 requests all echoed intact"
	client "${name}2" --port "$port" --conns 8 --requests 25 --reconnect
	check $? "$name: 200 connections (--reconnect) all echoed intact"
	offload_check "$name" "Tcp InSegs" $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	[ "$rings" -gt 0 ] && ring_check "$name" "$rings"
	threads_done "$name" 4 4 16200 accepted
}

scenario_g() {
	echo "== g. threads-reuseport, 4 threads, VMA_RING_ALLOCATION_LOGIC_RX=20"
	reuseport_scenario g 18008 4
}

# ---------------------------------------------------------------- n. threads, SO_REUSEPORT each, one ring
scenario_n() {
	echo "== n. threads-reuseport, 4 threads, default ring logic"
	LOGIC=0 reuseport_scenario n 18014 0
}

# ---------------------------------------------------------------- o. UDP threads, SO_REUSEPORT each, one ring
scenario_o() {
	echo "== o. udp-threads, 4 threads, default ring logic"
	LOGIC=0 udp_threads_scenario o udp-threads 4 18015 64 100 0
}

# ---------------------------------------------------------------- h. UDP threads, ring per thread
scenario_h() {
	echo "== h. udp-threads, 4 threads, VMA_RING_ALLOCATION_LOGIC_RX=20"
	udp_threads_scenario h udp-threads 4 18009 32 200 4
}

# ---------------------------------------------------------------- i. one UDP socket, two reader threads
scenario_i() {
	echo "== i. udp-shared, 2 reader threads on the main thread's socket, VMA_RING_ALLOCATION_LOGIC_RX=20"
	udp_threads_scenario i udp-shared 2 18010 16 300 0
}

# ---------------------------------------------------------------- j. peers of a killed worker
# 8 idle connections to a 2-worker prefork server; one worker is SIGKILLed:
# the peers of its connections must learn it within a second (ECONNRESET:
# vmad probes them, docs/vmad.md "Peers of a member that died"; on the
# kernel path the kernel closes them), the other worker's stay up and echo.
PEERS_CLIENT='
import os, select, socket, sys, time
port, go = int(sys.argv[1]), sys.argv[2]
conns = []
for i in range(8):
    s = socket.create_connection(("198.18.0.2", port), timeout=5)
    d = b"%02d" % i * 32; s.sendall(d); r = b""
    while len(r) < len(d): r += s.recv(len(d) - len(r))
    conns.append(s)
print("connected", flush=True)
while not os.path.exists(go): time.sleep(0.01)
t0 = time.time(); told = {}
while time.time() - t0 < 1.0 and len(told) < 8:
    live = [s for s in conns if s not in told]
    rd, _, _ = select.select(live, [], [], max(0.0, 1.0 - (time.time() - t0)))
    for s in rd:
        try:
            s.recv(100); told[s] = "eof"
        except ConnectionResetError:
            told[s] = "reset"
echo_ok = 0
for s in conns:
    if s in told: continue
    s.settimeout(3); d = b"again-%02d" % conns.index(s) * 8; s.sendall(d); r = b""
    try:
        while len(r) < len(d): r += s.recv(len(d) - len(r))
    except Exception: pass
    echo_ok += r == d
print("told %d (reset %d, eof %d) within %.2f s, silent %d, silent and echoing %d" % (len(told),
      sum(v == "reset" for v in told.values()), sum(v == "eof" for v in told.values()),
      time.time() - t0, 8 - len(told), echo_ok))
'
scenario_j() {
	echo "== j. peers of a SIGKILLed worker (prefork, 2 workers, 8 idle connections)"
	start_server j --port 18011 --model prefork --workers 2 || return
	rm -f "$TMP/j.go"
	timeout 30 nsenter --net=$CLIENT_NS python3 -c "$PEERS_CLIENT" 18011 "$TMP/j.go" >"$TMP/j.cli" 2>&1 &
	local cj=$! i
	for i in $(seq 100); do grep -q connected "$TMP/j.cli" && break; sleep 0.1; done
	kill -USR1 "$SPID"
	for i in $(seq 30); do
		[ "$(grep -c '^snapshot worker' "$TMP/j.stats")" -ge 2 ] && break
		sleep 0.1
	done
	local victim victim_conns
	victim=$(awk '$1 == "snapshot" {print $3; exit}' "$TMP/j.stats")
	victim_conns=$(awk -v v="$victim" '$1 == "snapshot" && $3 == v {print $5}' "$TMP/j.stats")
	kill -KILL "$victim" 2>/dev/null
	touch "$TMP/j.go"
	wait $cj
	sed 's/^/   /' "$TMP/j.cli"
	local told silent echoing
	read -r told silent echoing < <(awk '/^told/ {gsub(/,/, ""); print $2, $(NF-4), $NF}' "$TMP/j.cli")
	[ "${told:-x}" = "$victim_conns" ] && [ "$silent" = $((8 - victim_conns)) ] && [ "$echoing" = "$silent" ]
	check $? "j: the killed worker's $victim_conns peers told within 1 s (${told:-?}), the other $((8 - ${victim_conns:-0})) still echo (${echoing:-?})"
	stop_server j
}

# ---------------------------------------------------------------- k. privilege drop
# Started as root, the server becomes nobody before it opens a socket (the
# "-u user" of daemons), then forks 2 workers: libvma keeps a vmad spawner
# connection at the setuid, so the master's and the workers' rings are still
# granted (docs/vmad.md, "Privilege drop"): offloaded, kernel counters flat.
scenario_k() {
	echo "== k. prefork, 2 workers, server drops root for nobody before its sockets"
	# The server writes its pidfile as nobody.
	chmod 0777 "$TMP"
	start_server k --port 18012 --model prefork --workers 2 --user nobody || return
	local user
	user=$(ps -o user= -p "$SPID" 2>/dev/null | tr -d ' ')
	[ "$user" = nobody ]; check $? "k: the server runs as nobody (${user:-?})"
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client k1 --port 18012 --conns 8 --requests 1000
	check $? "k: 8 conns x 1000 requests all echoed intact"
	local grew=$(( $(tcp_in $SERVER_NS) - in0 )) sent=$(( $(tcp_out $CLIENT_NS) - out0 ))
	offload_check k "Tcp InSegs" $grew $sent
	stop_server k
	chmod 0700 "$TMP"
}

# ---------------------------------------------------------------- l. threads on one listener, ring per thread
# The connections of one listener move to the lane of the thread that
# accepts them (docs/process_model.md): every worker thread's ring carries
# traffic, not only the listener's.
scenario_l() {
	echo "== l. threads, 4 threads on one listener, VMA_RING_ALLOCATION_LOGIC_RX=20"
	VMA_RING_ALLOCATION_LOGIC_RX=20 start_server l --port 18012 --model threads --workers 4 || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client l1 --port 18012 --conns 8 --requests 2000
	check $? "l: 8 conns x 2000 requests all echoed intact"
	client l2 --port 18012 --conns 8 --requests 25 --reconnect
	check $? "l: 200 connections (--reconnect) all echoed intact"
	offload_check l "Tcp InSegs" $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	ring_check l 4
	threads_done l 4 6 16200 echoed
}

# ---------------------------------------------------------------- m. acceptor thread, 4 worker threads
# The main thread accepts and hands each connection to a worker thread:
# every connection follows its reader to that worker's lane after a window
# of VMA_RING_MIGRATION_RATIO_RX receive calls.
scenario_m() {
	echo "== m. threads-handoff, an acceptor and 4 workers, VMA_RING_ALLOCATION_LOGIC_RX=20"
	VMA_RING_ALLOCATION_LOGIC_RX=20 start_server m --port 18013 --model threads-handoff --workers 4 || return
	local in0 out0
	in0=$(tcp_in $SERVER_NS) out0=$(tcp_out $CLIENT_NS)
	client m1 --port 18013 --conns 8 --requests 2000
	check $? "m: 8 conns x 2000 requests all echoed intact"
	client m2 --port 18013 --conns 8 --requests 25 --reconnect
	check $? "m: 200 connections (--reconnect) all echoed intact"
	offload_check m "Tcp InSegs" $(( $(tcp_in $SERVER_NS) - in0 )) $(( $(tcp_out $CLIENT_NS) - out0 ))
	ring_check m 4
	threads_done m 4 6 16200 echoed
}

# MP_SCENARIOS="g h" runs only those (development).
for sc in ${MP_SCENARIOS:-a b c d e f g h i j k l m n o}; do
	"scenario_$sc"
done

# Multi-queue: the flows really went over every queue, and each queue
# handed its share to XSKs (not to the kernel: the counters above are flat).
if [ "$QUEUES" -gt 1 ] && [ "${VMA_RING_BACKEND:-}" = verbs ]; then
	echo "SKIP: per-queue XSK counters: the verbs backend has one QP per ring, no XSKs (the offload checks above stand)"
elif [ "$QUEUES" -gt 1 ]; then
	stats=$(nsenter --net="$SERVER_NS" ethtool -S "$TB_PREFIX-b0" 2>/dev/null)
	idle=""
	for q in $(seq 0 $((QUEUES - 1))); do
		n=$(awk -v k="rx_queue_${q}_xdp_redirect:" '$1 == k {print $2}' <<<"$stats")
		[ -n "$n" ] || { idle="no per-queue XDP counters (ethtool -S $TB_PREFIX-b0)"; break; }
		echo "queue $q: $n packets redirected to XSKs"
		if [ "$KERNEL_ONLY" = 1 ]; then [ "$n" = 0 ] || idle="$idle $q"; else [ "$n" -gt 0 ] || idle="$idle $q"; fi
	done
	[ -z "$idle" ]; check $? "every one of $QUEUES queues redirected packets to XSKs${idle:+ (not:$idle)}"
fi

# Nothing of ours may outlive its scenario.
left=""
for p in $(sort -u "$TMP/pids" 2>/dev/null); do is_ours "$p" && alive "$p" && left="$left $p"; done
[ -z "$left" ]; check $? "no server process left running${left:+ (left:$left)}"

echo "mp_procs: $npass passed, $nfail failed, $((SECONDS - START)) s"
[ $nfail = 0 ] && echo "mp_procs: all checks passed" || echo "mp_procs: FAILED"
[ $nfail = 0 ]

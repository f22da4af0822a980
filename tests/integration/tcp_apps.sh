#!/bin/bash
# Real TCP programs under LD_PRELOAD=libvma.so across the pair testbed (root).
# Usage: tcp_apps.sh BUILD_DIR|path/to/libvma.so   exit 0 pass, 1 fail, 77 skip.
# Server in <p>-b (198.18.0.2), client in <p>-a (198.18.0.1), p = TB_PREFIX
# (default tbn). Every pairing that has libvma on an end also checks that the
# kernel Tcp InSegs/OutSegs of that end's namespace stayed flat (offload).
#   sockperf --tcp pp and tp: both ends libvma, then server only, client only;
#     pp: every round trip answered; tp: the server counted every message sent
#   iperf3 (forward, 2 s) in the same three pairings: server received > 0,
#     <= client sent and at most 16 MiB behind (buffered at the test's end),
#     and the client's copy of the server's count equals the server's JSON
#   redis-server under libvma: redis-cli SET/GET of a 64 KiB binary value and a
#     text value (kernel and libvma client), redis-benchmark -t set,get
#     -n 20000 -q with a kernel client and a libvma client: non-zero rps
# Env: TCP_APPS_NO_PRELOAD=1 runs every program on the kernel (checks the
# script itself; the flat-counter checks are then reported, not asserted),
# TCP_APPS_SECONDS (2) per sockperf/iperf3 run, TCP_APPS_ONLY (regex over
# sockperf|iperf3|redis: run only those), TB_PREFIX.
set -u
ARG=${1:-$(dirname "$0")/../..}
LIB=$ARG
[ -d "$ARG" ] && LIB=$ARG/src/vma/.libs/libvma.so
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
NO_PRELOAD=${TCP_APPS_NO_PRELOAD:-0}
[ "$NO_PRELOAD" = 1 ] || [ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
[ "$NO_PRELOAD" = 1 ] || LIB=$(readlink -f "$LIB")
for tool in sockperf iperf3 redis-server redis-cli redis-benchmark python3 nsenter ss timeout; do
	command -v $tool >/dev/null || { echo "SKIP: needs $tool"; exit 77; }
done
HERE=$(cd "$(dirname "$0")" && pwd)
TESTBED=$HERE/../../contrib/testbed.sh
export TB_PREFIX=${TB_PREFIX:-tbn}
NS_A=$TB_PREFIX-a NS_B=$TB_PREFIX-b SERVER_IP=198.18.0.2
SECS=${TCP_APPS_SECONDS:-2}
# Segments an offloaded end's kernel may count and still be "flat": none
# belong to it, a few allow for nothing but noise.
FLAT=10
TMP=$(mktemp -d /tmp/tcp_apps.XXXXXX)
SERVER_PID=

# Two runs of this script (two helpers' run.sh) would tear down each
# other's namespaces: take turns on the prefix, up to 3 minutes.
exec 9>"/run/lock/tcp_apps-$TB_PREFIX.lock"
flock -w 180 9 || { echo "SKIP: another tcp_apps.sh holds $TB_PREFIX for over 3 minutes"; rm -rf "$TMP"; exit 77; }
bash "$TESTBED" up pair >"$TMP/testbed.log" 2>&1 || { cat "$TMP/testbed.log"; echo "SKIP: testbed"; exit 77; }
cleanup() {
	stop_server
	bash "$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

failures=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; failures=$((failures + 1)); fi; }
in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

# side_env vma|kernel: the env words that start a program on that side
# (nsenter, not ip netns exec: that hides the bpffs the XDP ring needs).
side_env() {
	if [ "$1" = vma ] && [ "$NO_PRELOAD" != 1 ]; then
		echo "env LD_PRELOAD=$LIB VMA_TRACELEVEL=2"
	else
		echo env
	fi
}

# tcp_segs NS: "InSegs OutSegs" of that namespace's kernel.
tcp_segs() {
	in_ns "$1" awk '$1 == "Tcp:" && !seen { for (i = 2; i <= NF; i++) col[$i] = i; seen = 1; next }
		$1 == "Tcp:" { print $col["InSegs"], $col["OutSegs"] }' /proc/net/snmp
}

# counters_begin: snapshot both namespaces. counters_check LABEL SRV CLI:
# for each end that ran libvma (vma), its kernel's deltas must be <= FLAT.
counters_begin() { SEGS_B0=$(tcp_segs "$NS_B"); SEGS_A0=$(tcp_segs "$NS_A"); }
counters_check() {
	local label=$1 srv=$2 cli=$3 b1 a1 side ns before after under din dout
	b1=$(tcp_segs "$NS_B") a1=$(tcp_segs "$NS_A")
	for side in server client; do
		if [ $side = server ]; then ns=$NS_B before=$SEGS_B0 after=$b1 under=$srv
		else ns=$NS_A before=$SEGS_A0 after=$a1 under=$cli; fi
		[ "$under" = vma ] || continue
		din=$(($(echo "$after" | cut -d' ' -f1) - $(echo "$before" | cut -d' ' -f1)))
		dout=$(($(echo "$after" | cut -d' ' -f2) - $(echo "$before" | cut -d' ' -f2)))
		if [ "$NO_PRELOAD" = 1 ]; then
			echo "info: $label: $side ($ns) kernel Tcp InSegs +$din OutSegs +$dout (no preload: not asserted)"
		else
			[ "$din" -le $FLAT ] && [ "$dout" -le $FLAT ]
			check $? "$label: $side ($ns, libvma) kernel Tcp InSegs +$din OutSegs +$dout flat (<= $FLAT)"
		fi
	done
}

# start_server OUT PORT CMD...: in NS_B; waits until PORT listens there.
start_server() {
	local out=$1 port=$2 i
	shift 2
	# nsenter itself, not the in_ns function: a backgrounded function is a
	# subshell, and its PID is not the server's (signals would miss it).
	nsenter --net="/run/netns/$NS_B" "$@" >"$out" 2>&1 &
	SERVER_PID=$!
	for i in $(seq 100); do
		kill -0 "$SERVER_PID" 2>/dev/null || { wait "$SERVER_PID"; echo "server exited ($?): $(tail -2 "$out")"; SERVER_PID=; return 1; }
		in_ns "$NS_B" ss -Hltn "sport = :$port" | grep -q . && return 0
		sleep 0.1
	done
	echo "server not listening on $port after 10 s: $(tail -2 "$out")"
	stop_server
	return 1
}

# stop_server [SIGNAL]: INT first (sockperf prints its count on it).
stop_server() {
	local i
	[ -n "$SERVER_PID" ] || return 0
	kill -"${1:-INT}" "$SERVER_PID" 2>/dev/null
	for i in $(seq 50); do
		kill -0 "$SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$SERVER_PID" 2>/dev/null
	wait "$SERVER_PID" 2>/dev/null
	SERVER_PID=
}

strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

PORT=15000
# The three pairings: server side, client side.
PAIRINGS=("vma vma" "vma kernel" "kernel vma")
label_of() { echo "server $1 / client $2"; }

# --- sockperf --tcp ------------------------------------------------------------
sockperf_pp() {
	local srv=$1 cli=$2 label out sent recv avg bad
	label="sockperf pp --tcp $(label_of "$srv" "$cli")"
	PORT=$((PORT + 1))
	counters_begin
	# shellcheck disable=SC2046
	start_server "$TMP/sp_srv" $PORT $(side_env "$srv") sockperf sr --tcp -i $SERVER_IP -p $PORT ||
		{ check 1 "$label: server start"; return; }
	# shellcheck disable=SC2046
	in_ns "$NS_A" timeout $((SECS + 10)) $(side_env "$cli") sockperf pp --tcp -i $SERVER_IP -p $PORT \
		-m 64 -t "$SECS" >"$TMP/sp_cli" 2>&1
	local rc=$?
	stop_server
	out=$(strip "$TMP/sp_cli")
	sent=$(echo "$out" | sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\);.*/\1/p' | tail -1)
	recv=$(echo "$out" | sed -n 's/.*\[Total Run\].*ReceivedMessages=\([0-9]*\).*/\1/p' | tail -1)
	avg=$(echo "$out" | sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' | tail -1)
	# sockperf's own stream checks: "# dropped messages = N" and the like.
	bad=$(echo "$out" | grep -oE '# (dropped|duplicated|out-of-order) messages = [0-9]+' |
		awk '{ s += $NF; n++ } END { print n == 3 ? s : "?" }')
	# The run ends with one request in flight: at most one unanswered.
	[ $rc = 0 ] && [ "${recv:-0}" -gt 0 ] && [ "$recv" -le "$sent" ] && [ "$recv" -ge $((sent - 1)) ] &&
		[ -n "$avg" ] && [ "$bad" = 0 ]
	check $? "$label: exit $rc, round trips sent ${sent:-?} answered ${recv:-?}, dropped+dup+ooo $bad, avg ${avg:-?} us"
	[ $rc = 0 ] || echo "$out" | tail -3 | sed 's/^/    client: /'
	counters_check "$label" "$srv" "$cli"
}

sockperf_tp() {
	local srv=$1 cli=$2 label sent recv
	label="sockperf tp --tcp $(label_of "$srv" "$cli")"
	PORT=$((PORT + 1))
	counters_begin
	# shellcheck disable=SC2046
	start_server "$TMP/sp_srv" $PORT $(side_env "$srv") sockperf sr --tcp -i $SERVER_IP -p $PORT ||
		{ check 1 "$label: server start"; return; }
	# shellcheck disable=SC2046
	in_ns "$NS_A" timeout $((SECS + 10)) $(side_env "$cli") sockperf tp --tcp -i $SERVER_IP -p $PORT \
		-m 64 -t "$SECS" >"$TMP/sp_cli" 2>&1
	local rc=$?
	# A stream loses nothing: give the server time to read the tail, then
	# its count on SIGINT must be exactly what the client sent.
	sleep 0.5
	stop_server
	sent=$(strip "$TMP/sp_cli" | sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' | tail -1)
	recv=$(strip "$TMP/sp_srv" | sed -n 's/.*Total \([0-9]*\) messages received.*/\1/p' | tail -1)
	[ $rc = 0 ] && [ "${sent:-0}" -gt 0 ] && [ "$sent" = "$recv" ]
	check $? "$label: exit $rc, 64 B messages sent ${sent:-?}, server received ${recv:-?}"
	[ $rc = 0 ] || strip "$TMP/sp_cli" | tail -3 | sed 's/^/    client: /'
	counters_check "$label" "$srv" "$cli"
}

# --- iperf3 ----------------------------------------------------------------------
iperf3_bytes() {  # JSON FIELD: end.<FIELD>.bytes, or "error: ..."
	python3 - "$1" "$2" <<'PY'
import json, re, sys
text = open(sys.argv[1], errors="replace").read()
# Skip anything a library printed before the JSON document.
m = re.search(r"^\{", text, re.M)
try:
    doc = json.JSONDecoder().raw_decode(text[m.start():])[0] if m else {}
except ValueError:
    doc = {}
if doc.get("error"):
    print("error:", doc["error"]); sys.exit()
print(doc.get("end", {}).get(sys.argv[2], {}).get("bytes", "none"))
PY
}

iperf3_run() {
	local srv=$1 cli=$2 label sent recv reported
	label="iperf3 $(label_of "$srv" "$cli")"
	PORT=$((PORT + 1))
	counters_begin
	# shellcheck disable=SC2046
	start_server "$TMP/ip_srv" $PORT $(side_env "$srv") iperf3 -s -1 -B $SERVER_IP -p $PORT -J ||
		{ check 1 "$label: server start"; return; }
	# shellcheck disable=SC2046
	in_ns "$NS_A" timeout $((SECS + 12)) $(side_env "$cli") iperf3 -c $SERVER_IP -p $PORT -t "$SECS" -J \
		>"$TMP/ip_cli" 2>&1
	local rc=$?
	# iperf3 -s -1 exits by itself once it has sent its results.
	for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
	stop_server
	sent=$(iperf3_bytes "$TMP/ip_cli" sum_sent)
	recv=$(iperf3_bytes "$TMP/ip_srv" sum_received)
	reported=$(iperf3_bytes "$TMP/ip_cli" sum_received)
	# The server stops counting at the test's end while the last writes
	# may still sit in the socket buffers (seen on the kernel too: 1.8 MB
	# short of 1.2 GB), so: 0 < received <= sent, at most 16 MiB behind, and
	# the count the client got back over the control connection is the
	# server's own.
	[ $rc = 0 ] && [ "$recv" -gt 0 ] 2>/dev/null && [ "$recv" -le "$sent" ] &&
		[ $((sent - recv)) -le $((16 << 20)) ] && [ "$reported" = "$recv" ]
	check $? "$label: exit $rc, client sent $sent bytes, server received $recv, client was told $reported"
	counters_check "$label" "$srv" "$cli"
}

# --- redis -----------------------------------------------------------------------
REDIS_PORT=16379
redis_checks() {
	local srv=vma label cli rc rps op
	label="redis-server ($srv)"
	counters_begin
	# shellcheck disable=SC2046
	start_server "$TMP/redis_srv" $REDIS_PORT $(side_env $srv) redis-server --port $REDIS_PORT \
		--bind $SERVER_IP --protected-mode no --save '' --appendonly no --daemonize no --dir "$TMP" --logfile "$TMP/redis.log" ||
		{ check 1 "$label: server start"; return; }
	head -c 65536 /dev/urandom >"$TMP/value"
	for cli in kernel vma; do
		# The client namespace is checked per client; the server's over all.
		local server_before=$SEGS_B0
		counters_begin
		SEGS_B0=$server_before
		# shellcheck disable=SC2046
		set -- timeout 10 $(side_env $cli) redis-cli -h $SERVER_IP -p $REDIS_PORT
		in_ns "$NS_A" "$@" -x SET "bin:$cli" <"$TMP/value" >"$TMP/set" 2>&1
		in_ns "$NS_A" "$@" --raw GET "bin:$cli" >"$TMP/got" 2>&1
		# --raw prints the value and one newline.
		head -c 65536 "$TMP/got" | cmp -s - "$TMP/value" && [ "$(stat -c %s "$TMP/got")" = 65537 ] &&
			[ "$(tr -d '\r\n' <"$TMP/set")" = OK ]
		check $? "redis-cli ($cli) SET/GET of a 64 KiB binary value byte for byte (SET: $(head -c 60 "$TMP/set" | tr -d '\r\n'))"
		[ "$(in_ns "$NS_A" "$@" SET "text:$cli" "hello, kernel bypass" 2>&1)" = OK ] &&
			[ "$(in_ns "$NS_A" "$@" GET "text:$cli" 2>&1)" = "hello, kernel bypass" ]
		check $? "redis-cli ($cli) SET/GET of a text value"
		# shellcheck disable=SC2046
		in_ns "$NS_A" timeout 60 $(side_env $cli) redis-benchmark -h $SERVER_IP -p $REDIS_PORT \
			-t set,get -n 20000 -q >"$TMP/bench" 2>&1
		rc=$?
		tr '\r' '\n' <"$TMP/bench" | grep 'requests per second' >"$TMP/bench.lines"
		for op in SET GET; do
			rps=$(awk -v op="$op:" '$1 == op { print int($2) }' "$TMP/bench.lines")
			[ $rc = 0 ] && [ "${rps:-0}" -gt 0 ]
			check $? "redis-benchmark ($cli client) -t set,get -n 20000: exit $rc, $op ${rps:-no result} rps"
		done
		[ $rc = 0 ] || tr '\r' '\n' <"$TMP/bench" | grep -v '^\s*$' | tail -2 | sed 's/^/    redis-benchmark: /'
		[ $cli = vma ] && counters_check "redis-cli + redis-benchmark (libvma client)" kernel vma
	done
	stop_server TERM
	counters_check "$label with kernel and libvma clients" "$srv" kernel
}

ONLY=${TCP_APPS_ONLY:-.}
echo "tcp_apps: $([ "$NO_PRELOAD" = 1 ] && echo "TCP_APPS_NO_PRELOAD=1: kernel only" || echo "library $LIB"), $NS_A -> $NS_B"
for pairing in "${PAIRINGS[@]}"; do
	# shellcheck disable=SC2086
	[[ sockperf =~ $ONLY ]] && { sockperf_pp $pairing; sockperf_tp $pairing; }
done
for pairing in "${PAIRINGS[@]}"; do
	# shellcheck disable=SC2086
	[[ iperf3 =~ $ONLY ]] && iperf3_run $pairing
done
[[ redis =~ $ONLY ]] && redis_checks

echo "tcp_apps: $failures failed"
[ $failures = 0 ]

# Plumbing of vma_bench.sh (sourced): namespaces, servers, counters, CPU time.
# Expects NS_A NS_B TESTBED BENCH_TMP set by the caller.

bench_log() { echo "bench: $*" >&2; }
bench_die() { bench_log "$*"; exit 2; }

in_ns() { local n=$1; shift; nsenter --net="/run/netns/$n" "$@"; }

testbed_alive() { [ -e "/run/netns/$NS_A" ] && [ -e "/run/netns/$NS_B" ]; }

TESTBED_UPS=0
# Another helper's "testbed.sh up/down" removes our namespaces; bring them
# back a few times, then give up.
testbed_ensure() {
	testbed_alive && return 0
	[ "$TESTBED_UPS" -lt 4 ] || bench_die "the testbed keeps vanishing (someone else runs testbed.sh?)"
	[ "$TESTBED_UPS" = 0 ] || bench_log "the testbed vanished; setting it up again"
	TESTBED_UPS=$((TESTBED_UPS + 1))
	TB_PREFIX=$TB_PREFIX "$TESTBED" up pair >"$BENCH_TMP/testbed.log" 2>&1 ||
		{ cat "$BENCH_TMP/testbed.log" >&2; bench_die "testbed setup failed"; }
	testbed_alive || bench_die "testbed.sh did not create $NS_A/$NS_B (does it honour TB_PREFIX=$TB_PREFIX?)"
	in_ns "$NS_A" ping -c 1 -W 2 "$SERVER_IP" >/dev/null || bench_die "$SERVER_IP not reachable from $NS_A"
}

# kernel_counters NS PROTO: "IN OUT" datagrams (udp) or segments (tcp) the
# kernel stack of NS has counted, read by column name from /proc/net/snmp.
kernel_counters() {
	local key in out
	case $2 in
	tcp) key=Tcp: in=InSegs out=OutSegs ;;
	*) key=Udp: in=InDatagrams out=OutDatagrams ;;
	esac
	in_ns "$1" awk -v key="$key" -v in_name="$in" -v out_name="$out" '
		$1 == key && !seen { for (i = 2; i <= NF; i++) col[$i] = i; seen = 1; next }
		$1 == key { print $col[in_name], $col[out_name] }' /proc/net/snmp 2>/dev/null
}

CLK_TCK=$(getconf CLK_TCK)
# proc_cpu PID: user+system seconds so far ("" once it is gone).
proc_cpu() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
	# Fields after "(comm)": state is 3, utime 14, stime 15.
	echo "${stat##*) }" | awk -v hz="$CLK_TCK" '{ printf "%.4f\n", ($12 + $13) / hz }'
}

SERVER_PID=
SERVER_FAILURE=
# start_server OUT PORT PROTO READY CMD...: READY is "listen" (wait until
# the port is bound in NS_B) or "line" (wait for a "ready" line in OUT).
# On failure SERVER_FAILURE says why (exit status or not ready in time).
start_server() {
	local out=$1 port=$2 proto=$3 ready=$4 i
	shift 4
	# nsenter, not "ip netns exec": that remounts /sys and hides the host
	# bpffs that the XDP ring (ring_echo, offloading libvma) needs.
	nsenter --net="/run/netns/$NS_B" "$@" >"$out" 2>&1 &
	SERVER_PID=$!
	for i in $(seq 50); do
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			wait "$SERVER_PID" 2>/dev/null
			SERVER_FAILURE="exited with status $?" SERVER_PID=
			return 1
		fi
		if [ "$ready" = line ]; then
			grep -q '^ready' "$out" && return 0
		elif [ "$proto" = tcp ]; then
			in_ns "$NS_B" ss -Hltn "sport = :$port" | grep -q . && return 0
		else
			in_ns "$NS_B" ss -Hlun "sport = :$port" | grep -q . && return 0
		fi
		sleep 0.1
	done
	SERVER_FAILURE="not ready after 5 s"
	stop_server
	return 1
}

# SIGINT first: sockperf sr prints its receive count on it, ring_echo
# detaches its XDP program.
stop_server() {
	local i
	[ -n "$SERVER_PID" ] || return 0
	kill -INT "$SERVER_PID" 2>/dev/null
	for i in $(seq 30); do
		kill -0 "$SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$SERVER_PID" 2>/dev/null
	wait "$SERVER_PID" 2>/dev/null
	SERVER_PID=
}

# run_client CPU_FILE TIMEOUT CMD...: in NS_A, CPU time measured by wait4.
run_client() {
	local cpu=$1 limit=$2
	shift 2
	python3 "$HERE/bench_report.py" exec "$cpu" -- timeout "$limit" nsenter --net="/run/netns/$NS_A" "$@"
}

# counter_delta "IN OUT" "IN OUT" 1|2: after - before of one column, or
# nothing when a snapshot is missing (the namespace was gone) or the counter
# went down (the namespace was replaced by a new one during the run).
counter_delta() {
	awk -v a="$1" -v b="$2" -v i="$3" 'BEGIN {
		if (split(a, x, " ") == 2 && split(b, y, " ") == 2 && y[i] >= x[i]) print y[i] - x[i] }'
}

#!/bin/bash
# mp_bench.sh [BUILD_DIR]: servers of several processes and threads, kernel
# against libvma in the same run (issue "many processes", docs/process_model.md).
# Rows: a pre-fork TCP server (1, 2, 4 workers, requests/s), a threaded TCP
# server (1, 2, 4 threads, one epoll each on one listener), the same with a
# SO_REUSEPORT listener per thread and a ring per thread
# (VMA_RING_ALLOCATION_LOGIC_RX=20), a pre-fork UDP server (1, 2, 4
# workers, datagrams/s) and a threaded UDP server (a SO_REUSEPORT socket and
# a ring per thread). The load: tests/integration/mp_client in the other
# namespace (kernel sockets), 8 connections of 64-byte request/echo round
# trips for BENCH_SECONDS (default 3) each. Prints one table: rate under the
# kernel, under libvma, their ratio, the scaling against the same column's
# 1-worker row, and the server namespace's kernel Tcp InSegs / Udp
# InDatagrams during the libvma run (flat = offloaded).
# It reports; it does not judge (exit 0 when it ran, 2 when it could not set up).
# Two runs of one build on this two-core testbed differ by up to 30% (the
# client's 8 threads and the server's share the cores, and the scheduler
# places them differently each run), so every cell is BENCH_ROUNDS (3)
# alternating kernel/libvma runs: the rates shown are the medians, the
# ratio is theirs, and "spread" is the lowest and highest ratio of the
# rounds' pairs. BENCH_ROUNDS=1 gives one run per cell (a third of the time).
# "top k/v": the busiest worker's share of the requests, in percent (median
# of the rounds), under the kernel and under libvma: where the clients
# landed, which the rates follow.
# Env: BENCH_SECONDS, BENCH_CONNS (8), BENCH_ROUNDS (3), TB_PREFIX (mpb), BENCH_VMA_ENV (extra
# VAR=VALUE words for the libvma runs, e.g. VMA_THREAD_MODE=3), BENCH_ROWS
# ("MODEL PROTO [VAR=VALUE ...] [--server-option ...]" separated by ';': the
# VAR=VALUE words after PROTO are more environment for that row's libvma
# runs, the --words options of mp_server for both runs, e.g. --work-us=20;
# default: the rows below).
# Rows with --work-us=20 give every request 20 us of server CPU (a loop
# calibrated at start, as a real server parses and builds its answers): the
# server, not the load generator that shares the two cores, is then the
# bottleneck, so they show how throughput grows with threads (the issue's
# "2 threads >= 1.6x one thread").
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/bench_stats.sh"
TOP=$(cd "$HERE/../.." && pwd)
BUILD=$(cd "${1:-$TOP/build}" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
SRV=$BUILD/tests/integration/mp_server
CLI=$BUILD/tests/integration/mp_client
SECONDS_RUN=${BENCH_SECONDS:-3}
CONNS=${BENCH_CONNS:-8}
ROUNDS=${BENCH_ROUNDS:-3}
case $ROUNDS in '' | *[!0-9]* | 0) echo "mp_bench: BENCH_ROUNDS must be 1 or more, not '$ROUNDS'" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "mp_bench: needs root" >&2; exit 2; }
for f in "$LIB" "$SRV" "$CLI"; do [ -e "$f" ] || { echo "mp_bench: no $f (make check builds it)" >&2; exit 2; }; done
export TB_PREFIX=${TB_PREFIX:-mpb}
TMP=$(mktemp -d /tmp/mp_bench.XXXXXX)
cleanup() {
	pkill -f "$SRV --port 19[3-9][0-9][0-9]" 2>/dev/null
	bash "$TOP/contrib/testbed.sh" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
bash "$TOP/contrib/testbed.sh" up pair >/dev/null || { echo "mp_bench: testbed" >&2; exit 2; }
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
counter() { # counter tcp|udp: Tcp InSegs or Udp InDatagrams of the server namespace
	if [ "$1" = udp ]; then
		$B awk '/^Udp:/{n++; if (n == 2) print $2}' /proc/net/snmp
	else
		$B awk '/^Tcp:/{n++; if (n == 2) print $11}' /proc/net/snmp
	fi
}

PORT=19300
# run PORT CONFIG MODEL WORKERS PROTO [VAR=VALUE...]: prints "RATE DELTA"
# (rate "n/a" on failure). Every run has a port of its own: the previous
# server may still be going away on its port (run is called in a subshell,
# so the caller counts the ports).
run() {
	local PORT=$1 config=$2 model=$3 workers=$4 proto=$5 pre="" udp="" w envs=() sargs=()
	shift 5
	for w in "$@"; do
		case $w in --*) sargs+=("${w/=/ }") ;; *) envs+=("$w") ;; esac
	done
	[ "$config" = libvma ] && pre="env LD_PRELOAD=$LIB ${BENCH_VMA_ENV:-} ${envs[*]}"
	[ "$proto" = udp ] && udp=--udp
	# shellcheck disable=SC2068 # "--opt value" splits into two words
	$B $pre "$SRV" --port $PORT --bind 198.18.0.2 --model "$model" --workers "$workers" \
		--max-seconds $((SECONDS_RUN + 30)) ${sargs[@]} >"$TMP/srv.out" 2>"$TMP/srv.err" &
	local job=$!
	for _ in $(seq 100); do grep -q '^ready' "$TMP/srv.out" && break; sleep 0.1; done
	local before after out rate
	before=$(counter "$proto")
	out=$($A timeout $((SECONDS_RUN + 20)) "$CLI" --server 198.18.0.2 --port $PORT --conns "$CONNS" \
		--seconds "$SECONDS_RUN" $udp 2>/dev/null)
	after=$(counter "$proto")
	kill -TERM $job 2>/dev/null
	wait $job 2>/dev/null
	rate=$(echo "$out" | sed -n 's/^ok .*rate \([0-9.]*\) .*/\1/p')
	# Requests that failed (a UDP datagram lost, a reply later than the
	# client's timeout): the rate stands, reported with the count.
	local failed
	failed=$(echo "$out" | sed -n 's/^error requests [0-9]* failed \([0-9]*\) .*rate \([0-9.]*\) .*/\1 \2/p')
	if [ -z "$rate" ] && [ -n "$failed" ]; then
		echo "mp_bench: $config $model x$workers: ${failed%% *} requests failed" >&2
		rate=${failed#* }
	fi
	# A libvma run whose traffic reached the kernel, or that failed: keep
	# the server's log for a look (offload refused, a warning).
	if [ "$config" = libvma ] && { [ -z "$rate" ] || [ -n "$failed" ] || [ $((after - before)) -gt 1000 ]; }; then
		cp "$TMP/srv.err" "/tmp/mp_bench.$model.$workers.$PORT.err" 2>/dev/null &&
			echo "mp_bench: $model x$workers: server log kept in /tmp/mp_bench.$model.$workers.$PORT.err" >&2
	fi
	# The busiest worker's share of the requests (mp_server's "worker ...
	# requests N" lines at exit): SO_REUSEPORT and accept() spread the 8
	# clients unevenly, differently in every run.
	local top
	top=$(awk '/^worker /{ n = $NF; t += n; if (n > m) m = n } END { if (t > 0) printf "%d", 100 * m / t; else print "-" }' \
		"$TMP/srv.out")
	echo "${rate:-n/a} $((after - before)) $top"
}

printf '%-34s %10s %10s %6s %-11s %7s %7s %-7s %s\n' "server" "kernel/s" "libvma/s" "ratio" "spread" "k-scale" "v-scale" \
	"top k/v" "kernel counter (libvma runs, most)"
LANES=VMA_RING_ALLOCATION_LOGIC_RX=20
WORK=--work-us=20
DEFAULT_ROWS="prefork tcp;threads tcp;threads tcp $LANES;threads-reuseport tcp $LANES;udp-prefork udp"
DEFAULT_ROWS+=";udp-threads udp $LANES;prefork tcp $WORK;threads tcp $LANES $WORK"
DEFAULT_ROWS+=";threads-reuseport tcp $LANES $WORK;udp-threads udp $LANES $WORK"
IFS=';' read -r -a ROWS <<<"${BENCH_ROWS:-$DEFAULT_ROWS}"
for spec in "${ROWS[@]}"; do
	set -- $spec
	model=$1 proto=$2
	shift 2
	extra="$*"
	# The row's name: the model, lanes per thread (lane/t), the work per
	# request; the server options go to the kernel run too.
	label=$model
	kargs=()
	for word in $extra; do
		case $word in
		VMA_RING_ALLOCATION_LOGIC_RX=20) label+=" lane/t" ;;
		--work-us=*) label+=" ${word#--work-us=}us"; kargs+=("$word") ;;
		--*) label+=" $word"; kargs+=("$word") ;;
		*) label+=" ${word%%=*}" ;;
		esac
	done
	k1="" v1=""
	for w in 1 2 4; do
		krates=() vrates=() ratios=() ktops=() vtops=() vdelta=0
		for _ in $(seq "$ROUNDS"); do
			PORT=$((PORT + 2))
			read -r krate _ ktop < <(run $((PORT - 1)) kernel "$model" $w "$proto" "${kargs[@]}")
			read -r vrate delta vtop < <(run $PORT libvma "$model" $w "$proto" $extra)
			krates+=("$krate") vrates+=("$vrate") ratios+=("$(ratio_of "$vrate" "$krate")")
			ktops+=("$ktop") vtops+=("$vtop")
			[ "$delta" -gt "$vdelta" ] && vdelta=$delta
		done
		krate=$(median "${krates[@]}") vrate=$(median "${vrates[@]}")
		spread=$(printf '%s\n' "${ratios[@]}" | grep -E '^[0-9.]+$' | sort -g | sed -n '1p;$p' | paste -sd- -)
		[ -z "$spread" ] && spread=n/a
		[ "$ROUNDS" = 1 ] && spread=-
		[ $w = 1 ] && { k1=$krate; v1=$vrate; }
		printf '%-34s %10s %10s %6s %-11s %7s %7s %-7s %s\n' "$label x$w" "$krate" "$vrate" "$(ratio_of "$vrate" "$krate")" \
			"$spread" "$(ratio_of "$krate" "$k1")" "$(ratio_of "$vrate" "$v1")" \
			"$(median "${ktops[@]}")/$(median "${vtops[@]}")" "+$vdelta"
	done
done

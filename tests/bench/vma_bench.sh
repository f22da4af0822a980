#!/bin/bash
# vma_bench.sh [--quick] [--check] [--strict] [--json FILE] [BUILD_DIR]:
# kernel sockets against libvma, side by side, in one run on the
# two-namespace testbed (client in NS_A 198.18.0.1, server in NS_B
# 198.18.0.2). The configurations:
#   kernel         plain programs both ends (blocking sockets: how users run them)
#   kernel-bp      both ends busy-poll the kernel (--nonblocked --lls 50)
#   libvma-server  LD_PRELOAD=libvma.so on the server only
#   libvma-client  LD_PRELOAD=libvma.so on the client only (TCP sockperf, full mode)
#   libvma-both    LD_PRELOAD=libvma.so on both ends
# UDP: sockperf pp/tp/ul in the first four, the latency floor (udp_pp_client
# against ring_echo, a bare AF_XDP echo, and against udp_echo_kernel), the
# Extra API's receive methods (xapi64: tools/udp_lat/vma_udp_lat ping-pong,
# both ends receiving by recv, the receive callback, recvfrom_zcopy or
# socketxtreme_poll under libvma, and the kernel blocking and busy-polling)
# and an iperf2 -u smoke. TCP: sockperf --tcp pp/tp, iperf3 bulk and tcp_connrate
# (sequential connect/close) in kernel and libvma configurations. Each run
# snapshots the kernel counters (/proc/net/snmp Udp or Tcp) of both
# namespaces: under an offloading libvma they stay flat.
#
# Prints tables and writes a JSON report (path printed). Exit 0 when it ran
# (it reports, it does not judge; a failed libvma run is a row "n/a
# (reason)"), 1 with --check when a target of the issue is missed, 1 with
# --strict when any run failed, 2 when it could not set up.
#
# --quick: UDP pp64 tp64 xapi64, TCP pp64 tp64 iperf3 connrate (TCP: kernel
# and libvma-both only), 2 s a run (the demo, ~3 min). Full: ~5 s a run.
# Env: BENCH_SECONDS (per run), BENCH_PORT (first port, 12000), TB_PREFIX
# (namespace prefix, vmatb), BENCH_TESTBED=keep (use the namespaces that
# exist and leave them), BENCH_VMA_ENV (extra VAR=VALUE words for libvma),
# BENCH_WORKLOADS (replaces the workload list, lines separated by ";"),
# BENCH_TCP_CONFIGS (replaces the configurations of every TCP row),
# BENCH_XAPI_ROUNDS (rounds of the xapi64 configurations, 3).
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/../.." && pwd)
QUICK=0 CHECK=0 STRICT=0 JSON=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) QUICK=1 ;;
	--check) CHECK=1 ;;
	--strict) STRICT=1 ;;
	--json) JSON=${2:?--json FILE}; shift ;;
	-h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
	shift
done
BUILD=$(cd "${1:-${BUILD_DIR:-$PWD}}" 2>/dev/null && pwd) || { echo "bench: no build dir ${1:-}" >&2; exit 2; }
LIBVMA=$BUILD/src/vma/.libs/libvma.so
TB_PREFIX=${TB_PREFIX:-vmatb}
NS_A=$TB_PREFIX-a NS_B=$TB_PREFIX-b SERVER_IF=$TB_PREFIX-b0
SERVER_IP=198.18.0.2
TESTBED=$TOP/contrib/testbed.sh
PORT=${BENCH_PORT:-12000}
BENCH_TMP=$(mktemp -d /tmp/vma-bench.XXXXXX)
RECORDS=$BENCH_TMP/records.jsonl
. "$HERE/lib_bench.sh"

# --- the workloads: one line each -----------------------------------------
# NAME KIND PROTO SIZE [EXTRA CLIENT ARGS...]. KIND picks the runner:
# pp/tp/ul = sockperf ping-pong / throughput / under-load, iperf3 = iperf3
# TCP bulk (SIZE 0: iperf3's default 128 KiB writes), connrate = tcp_connrate.
# PROTO udp|tcp (tcp adds --tcp and reads the Tcp counters).
TCP_WORKLOADS=("tcp_pp64 pp tcp 64" "tcp_tp64 tp tcp 64" "iperf3 iperf3 tcp 0" "connrate connrate tcp 0")
if [ $QUICK = 1 ]; then
	SECONDS_PER_RUN=${BENCH_SECONDS:-2}
	WORKLOADS=("pp64 pp udp 64" "tp64 tp udp 64" "xapi64 xapi udp 64" "${TCP_WORKLOADS[@]}")
	TCP_SOCKPERF_CONFIGS=(kernel libvma-both)
	TCP_APP_CONFIGS=(kernel libvma-both)
else
	SECONDS_PER_RUN=${BENCH_SECONDS:-5}
	WORKLOADS=("pp64 pp udp 64" "pp1472 pp udp 1472" "tp64 tp udp 64" "ul64 ul udp 64 --mps=10000"
		"xapi64 xapi udp 64" "${TCP_WORKLOADS[@]}")
	TCP_SOCKPERF_CONFIGS=(kernel kernel-bp libvma-server libvma-client libvma-both)
	TCP_APP_CONFIGS=(kernel libvma-server libvma-both)
fi
# BENCH_WORKLOADS="LINE;LINE..." replaces the list (e.g. to try a new line).
[ -n "${BENCH_WORKLOADS:-}" ] && IFS=';' read -r -a WORKLOADS <<<"$BENCH_WORKLOADS"
if [ -n "${BENCH_TCP_CONFIGS:-}" ]; then
	read -r -a TCP_SOCKPERF_CONFIGS <<<"$BENCH_TCP_CONFIGS"
	TCP_APP_CONFIGS=("${TCP_SOCKPERF_CONFIGS[@]}")
fi
CONFIGS=(kernel kernel-bp libvma-server libvma-both)
KERNEL_BUSY_POLL=(--nonblocked --lls 50)
FLOOR_COUNT=$((SECONDS_PER_RUN * 40000))

# --- checks and the testbed --------------------------------------------------
[ "$(id -u)" = 0 ] || bench_die "needs root (network namespaces, XDP)"
for p in sockperf iperf3 nsenter python3 ss timeout; do
	command -v $p >/dev/null || bench_die "$p not found (contrib/deps.sh install)"
done
[ -e "$LIBVMA" ] || bench_die "$LIBVMA not found: build first, then pass the build dir"

cleanup() {
	stop_server
	[ "${BENCH_TESTBED:-}" = keep ] || TB_PREFIX=$TB_PREFIX "$TESTBED" down >/dev/null 2>&1
	rm -rf "$BENCH_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
if [ "${BENCH_TESTBED:-}" = keep ]; then
	testbed_alive || bench_die "BENCH_TESTBED=keep but $NS_A/$NS_B do not exist"
	TESTBED_UPS=4
else
	testbed_ensure
fi

# --- one run -------------------------------------------------------------------
VMA_ENV_EXTRA=(${BENCH_VMA_ENV:-})
# side_env CONFIG SIDE KIND: the env words of that side (none for the kernel).
side_env() {
	case $1:$2 in
	libvma-server:server|libvma-client:client|libvma-both:*)
		echo "LD_PRELOAD=$LIBVMA"
		case $3 in pp|ul) echo VMA_SPEC=latency ;; esac
		printf '%s\n' "${VMA_ENV_EXTRA[@]}" ;;
	esac
}

RUN_NO=0
# measure_run NAME CONFIG KIND PROTO SIZE SERVER_CMD CLIENT_CMD: both commands
# are single strings of words; {PORT} is replaced. Appends one record.
measure_run() {
	local name=$1 config=$2 kind=$3 proto=$4 size=$5 scmd=$6 ccmd=$7
	local port=$((PORT + RUN_NO)) ready=listen err= attempt
	local tag="$BENCH_TMP/$RUN_NO" cpu0= cpu1= srv0= srv1= cli0= cli1= rc=
	RUN_NO=$((RUN_NO + 1))
	case $kind in floor|connrate) ready=line ;; esac
	scmd=${scmd//\{PORT\}/$port} ccmd=${ccmd//\{PORT\}/$port}
	bench_log "[$RUN_NO] $name $config"
	for attempt in 1 2; do
		testbed_ensure
		err=
		# shellcheck disable=SC2086
		start_server "$tag.server" "$port" "$proto" $ready $scmd ||
			{ err="server $SERVER_FAILURE: $(grep -v '^\s*$' "$tag.server" | tail -1 | tr -d '"\\')"; break; }
		srv0=$(kernel_counters "$NS_B" "$proto") cli0=$(kernel_counters "$NS_A" "$proto")
		cpu0=$(proc_cpu "$SERVER_PID")
		# shellcheck disable=SC2086
		# A hung client (a libvma bug) costs a bounded time, not the run.
		run_client "$tag.ccpu" $((SECONDS_PER_RUN * 2 + 10)) $ccmd >"$tag.client" 2>&1
		rc=$?
		sleep 0.2 # datagrams still in flight reach the server's count
		cpu1=$(proc_cpu "$SERVER_PID")
		srv1=$(kernel_counters "$NS_B" "$proto") cli1=$(kernel_counters "$NS_A" "$proto")
		stop_server
		testbed_alive && break
		bench_log "the testbed vanished during the run; running it again"
	done
	[ -z "$err" ] && [ "$rc" != 0 ] && err="client exit $rc: $(grep -v '^\s*$' "$tag.client" | tail -1 | tr -d '"\\')"
	[ "$rc" = 124 ] && err="client timed out after $((SECONDS_PER_RUN * 2 + 10)) s"
	python3 "$HERE/bench_report.py" record workload="$name" config="$config" kind="$kind" \
		proto="$proto" size="$size" seconds="$SECONDS_PER_RUN" error="$err" \
		client_out="$tag.client" server_out="$tag.server" client_cpu="$tag.ccpu" \
		server_cpu_s="$(awk -v a="${cpu0:-}" -v b="${cpu1:-}" 'BEGIN { if (a != "" && b != "") print b - a }')" \
		srv_in="$(counter_delta "$srv0" "$srv1" 1)" srv_out="$(counter_delta "$srv0" "$srv1" 2)" \
		cli_in="$(counter_delta "$cli0" "$cli1" 1)" cli_out="$(counter_delta "$cli0" "$cli1" 2)" >>"$RECORDS"
	# Keep the raw outputs beside the JSON for a look at a strange row.
	cp "$tag.client" "$RAW_DIR/$name.$config.client.txt" 2>/dev/null
	cp "$tag.server" "$RAW_DIR/$name.$config.server.txt" 2>/dev/null
}

# sockperf_run NAME KIND PROTO SIZE EXTRA... for every configuration.
sockperf_run() {
	local name=$1 kind=$2 proto=$3 size=$4 config senv cenv flags tcp=
	local -a configs=("${CONFIGS[@]}")
	shift 4
	[ "$proto" = tcp ] && tcp=--tcp configs=("${TCP_SOCKPERF_CONFIGS[@]}")
	for config in "${configs[@]}"; do
		senv=$(side_env "$config" server "$kind" | tr '\n' ' ')
		cenv=$(side_env "$config" client "$kind" | tr '\n' ' ')
		flags=
		[ "$config" = kernel-bp ] && flags="${KERNEL_BUSY_POLL[*]}"
		measure_run "$name" "$config" "$kind" "$proto" "$size" \
			"env $senv sockperf sr -i $SERVER_IP -p {PORT} $tcp $flags" \
			"env $cenv sockperf $kind -i $SERVER_IP -p {PORT} $tcp -m $size -t $SECONDS_PER_RUN $flags $*"
	done
}

floor_run() {
	local bench=$BUILD/tests/bench server
	for server in ring_echo udp_echo_kernel; do
		if [ ! -x "$bench/$server" ] || [ ! -x "$bench/udp_pp_client" ]; then
			echo "{\"workload\":\"floor64\",\"config\":\"$server\",\"kind\":\"floor\",\"error\":\"$bench/$server or udp_pp_client not built\"}" >>"$RECORDS"
			continue
		fi
		case $server in
		ring_echo) measure_run floor64 ring_echo floor udp 64 "$bench/ring_echo $SERVER_IF {PORT}" \
			"$bench/udp_pp_client $SERVER_IP {PORT} $FLOOR_COUNT 64 1000" ;;
		*) measure_run floor64 kernel-echo floor udp 64 "$bench/udp_echo_kernel {PORT}" \
			"$bench/udp_pp_client $SERVER_IP {PORT} $FLOOR_COUNT 64 1000" ;;
		esac
	done
}

iperf2_run() {
	local config senv cenv
	command -v iperf >/dev/null || { echo '{"workload":"iperf2","config":"kernel","kind":"iperf2","error":"iperf (iperf2) not installed"}' >>"$RECORDS"; return; }
	for config in kernel libvma-both; do
		senv=$(side_env "$config" server iperf2 | tr '\n' ' ')
		cenv=$(side_env "$config" client iperf2 | tr '\n' ' ')
		measure_run iperf2 "$config" iperf2 udp 1470 "env $senv iperf -u -s -B $SERVER_IP -p {PORT}" \
			"env $cenv iperf -u -c $SERVER_IP -p {PORT} -b 100M -t 2"
	done
}

# iperf3_run NAME KIND PROTO SIZE EXTRA...: TCP bulk, one stream; Gb/s,
# retransmits and both ends' CPU% come from the client's -J report.
iperf3_run() {
	local name=$1 kind=$2 proto=$3 size=$4 config senv cenv len=
	shift 4
	[ "$size" -gt 0 ] 2>/dev/null && len="-l $size"
	for config in "${TCP_APP_CONFIGS[@]}"; do
		senv=$(side_env "$config" server "$kind" | tr '\n' ' ')
		cenv=$(side_env "$config" client "$kind" | tr '\n' ' ')
		measure_run "$name" "$config" "$kind" "$proto" "$size" \
			"env $senv iperf3 -s -1 -B $SERVER_IP -p {PORT} -J" \
			"env $cenv iperf3 -c $SERVER_IP -p {PORT} -t $SECONDS_PER_RUN $len -J $*"
	done
}

# connrate_run NAME KIND PROTO SIZE: sequential connect/close cycles.
connrate_run() {
	local name=$1 kind=$2 proto=$3 size=$4 config senv cenv prog=$BUILD/tests/bench/tcp_connrate
	if [ ! -x "$prog" ]; then
		echo "{\"workload\":\"$name\",\"config\":\"kernel\",\"kind\":\"connrate\",\"error\":\"$prog not built (make -C BUILD_DIR tests/bench/tcp_connrate)\"}" >>"$RECORDS"
		return
	fi
	for config in "${TCP_APP_CONFIGS[@]}"; do
		senv=$(side_env "$config" server "$kind" | tr '\n' ' ')
		cenv=$(side_env "$config" client "$kind" | tr '\n' ' ')
		measure_run "$name" "$config" "$kind" "$proto" "$size" \
			"env $senv $prog -s $SERVER_IP {PORT}" "env $cenv $prog $SERVER_IP {PORT} $SECONDS_PER_RUN"
	done
}

# xapi_run NAME KIND PROTO SIZE: vma_udp_lat ping-pong, both ends receiving
# the same way: the kernel (blocking, then busy-polling with SO_BUSY_POLL),
# and under libvma (VMA_SPEC=latency) by recv, the receive callback,
# recvfrom_zcopy and socketxtreme_poll (with VMA_SOCKETXTREME=1), and
# libvma-mix: one run of recv, zcopy and xtreme interleaved (vma_udp_lat -r
# mix: both ends switch every 100 round trips), whose rows the targets use:
# separate runs differ by 10% on a virtual machine whatever they run.
# The configurations run in turn, BENCH_XAPI_ROUNDS (3) times over, so a
# change of the host's load touches every method alike; the report gives
# each configuration's median and the spread over the rounds.
XAPI_CONFIGS=(kernel kernel-bp libvma-recv libvma-cb libvma-zcopy libvma-xtreme libvma-mix)
XAPI_ROUNDS=${BENCH_XAPI_ROUNDS:-3}
xapi_run() {
	local name=$1 kind=$2 proto=$3 size=$4 prog=$BUILD/tools/udp_lat/vma_udp_lat config mode env flags round
	if [ ! -x "$prog" ]; then
		echo "{\"workload\":\"$name\",\"config\":\"kernel\",\"kind\":\"xapi\",\"error\":\"$prog not built\"}" >>"$RECORDS"
		return
	fi
	for round in $(seq "$XAPI_ROUNDS"); do
	for config in "${XAPI_CONFIGS[@]}"; do
		flags= env=
		case $config in
		kernel) mode=recv ;;
		kernel-bp) mode=recv flags=--spin ;;
		libvma-*)
			mode=${config#libvma-}
			env="LD_PRELOAD=$LIBVMA VMA_SPEC=latency ${VMA_ENV_EXTRA[*]}"
			[ "$mode" = xtreme ] || [ "$mode" = mix ] && env="$env VMA_SOCKETXTREME=1" ;;
		esac
		measure_run "$name" "$config" "$kind" "$proto" "$size" \
			"env $env $prog -s -i $SERVER_IP -p {PORT} -r $mode $flags" \
			"env $env $prog -c $SERVER_IP -p {PORT} -r $mode -m $size -n $FLOOR_COUNT -t $SECONDS_PER_RUN $flags"
	done
	done
}

# run_workload NAME KIND PROTO SIZE EXTRA...: one line of WORKLOADS.
run_workload() {
	case $2 in
	pp|tp|ul) sockperf_run "$@" ;;
	iperf3) iperf3_run "$@" ;;
	connrate) connrate_run "$@" ;;
	xapi) xapi_run "$@" ;;
	*) bench_log "unknown workload kind '$2' in '$*'" ;;
	esac
}

# --- the run ---------------------------------------------------------------------
STAMP=$(date +%Y%m%d-%H%M%S)
JSON=${JSON:-$BUILD/bench-results/vma_bench-$STAMP.json}
mkdir -p "$(dirname "$JSON")" || bench_die "cannot create $(dirname "$JSON")"
RAW_DIR=${JSON%.json}.raw
mkdir -p "$RAW_DIR"
: >"$RECORDS"
bench_log "libvma: $LIBVMA; $SECONDS_PER_RUN s a run; $NS_A -> $NS_B ($SERVER_IP)"

HAVE_UDP_PP=0
for w in "${WORKLOADS[@]}"; do
	# shellcheck disable=SC2086
	run_workload $w
	case " $w " in *" pp udp "*) HAVE_UDP_PP=1 ;; esac
done
# The floor rows are read against the UDP ping-pong; alone they mean nothing.
[ $HAVE_UDP_PP = 1 ] && floor_run
[ $QUICK = 1 ] || iperf2_run

cat >"$BENCH_TMP/meta.json" <<EOF
{"date": "$STAMP", "mode": "$([ $QUICK = 1 ] && echo quick || echo full)", "seconds_per_run": $SECONDS_PER_RUN,
 "kernel": "$(uname -r)", "cpus": $(nproc), "libvma": "$LIBVMA",
 "libvma_env": "LD_PRELOAD=$LIBVMA; VMA_SPEC=latency for pp/ul; ${BENCH_VMA_ENV:-}",
 "tcp_sockperf_configs": "${TCP_SOCKPERF_CONFIGS[*]}", "tcp_app_configs": "${TCP_APP_CONFIGS[*]}",
 "kernel_busy_poll_flags": "${KERNEL_BUSY_POLL[*]}", "floor_client": "udp_pp_client (SO_BUSY_POLL spin), $FLOOR_COUNT round trips",
 "namespaces": ["$NS_A", "$NS_B"], "server_ip": "$SERVER_IP", "raw_outputs": "$RAW_DIR"}
EOF
python3 "$HERE/bench_report.py" report "$RECORDS" "$BENCH_TMP/meta.json" "$JSON" \
	$([ $CHECK = 1 ] && echo --check) $([ $STRICT = 1 ] && echo --strict)

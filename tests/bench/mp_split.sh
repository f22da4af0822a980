#!/bin/bash
# mp_split.sh LIB [ROUNDS] [MODEL WORKERS [VAR=VALUE ...]]: where the CPU of
# a many-threads server run goes, server against client, under the kernel
# and under libvma (LIB), in alternating runs (ROUNDS, default 4, of each).
# Root; own testbed (TB_PREFIX, default vmasplit).
#
# Each run: tests/integration/mp_server --model MODEL (threads) --workers
# WORKERS (4) in one namespace, mp_client (8 connections of 64-byte
# request/echo round trips, 5 s; datagrams for the udp-* models) in the
# other. Over 3 s in the middle of
# the run it reads, from /proc/PID/task/*/{status,stat} of both processes
# and /proc/net/dev of the server namespace, per request:
#   srv_cpu, cli_cpu  user + system CPU time (µs) of server and client
#   srv_sleeps        the server threads' voluntary context switches (they
#                     went to sleep, in epoll_wait or a blocking call)
#   srv_preempt       their involuntary ones
#   rx, tx            packets through the server's veth
#   usr, sys, sirq    the whole machine's user, system and softirq time
#                     (/proc/stat): the kernel's work for both processes,
#                     the packets' softirq processing (XDP, the peer's
#                     receive and the wake-up of the thread it is for)
#                     included, whichever task it interrupted
# The two sides share the machine's cores, so the rate is roughly the CPU
# there is divided by srv_cpu + cli_cpu (docs/benchmarks.md, "Many
# processes and threads"). VAR=VALUE words are more environment for the
# libvma runs (e.g. VMA_RING_ALLOCATION_LOGIC_RX=20).
# Exit 0 when it ran, 2 when it could not set up.
set -u
[ $# -ge 1 ] || { echo "usage: $0 LIB [ROUNDS] [MODEL WORKERS [VAR=VALUE ...]]" >&2; exit 2; }
LIB=$(readlink -f "$1") ROUNDS=${2:-4} MODEL=${3:-threads} WORKERS=${4:-4}
shift $(($# < 4 ? $# : 4))
EXTRA_ENV=("$@")
TOP=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILDDIR:-$TOP/build}
SRV=$BUILD/tests/integration/mp_server CLI=$BUILD/tests/integration/mp_client
[ "$(id -u)" = 0 ] || { echo "mp_split: needs root (namespaces)" >&2; exit 2; }
for f in "$LIB" "$SRV" "$CLI"; do [ -f "$f" ] || { echo "mp_split: no $f" >&2; exit 2; }; done
export TB_PREFIX=${TB_PREFIX:-vmasplit}
bash "$TOP/contrib/testbed.sh" up pair >/dev/null || exit 2
TMP=$(mktemp -d)
trap 'pkill -f "$SRV --port 1950[0-9]" 2>/dev/null; bash "$TOP/contrib/testbed.sh" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
trap 'exit 143' TERM INT
NS_CLI="nsenter --net=/run/netns/$TB_PREFIX-a" NS_SRV="nsenter --net=/run/netns/$TB_PREFIX-b"
DEV=$TB_PREFIX-b0
HZ=$(getconf CLK_TCK)

# pid -> "voluntary nonvoluntary ticks" summed over its threads
snap() {
	local v=0 n=0 t=0 d
	for d in /proc/"$1"/task/*; do
		read -r dv dn < <(awk '/^voluntary_ctxt/{v=$2} /^nonvoluntary_ctxt/{n=$2} END{print v+0, n+0}' \
			"$d/status" 2>/dev/null || echo "0 0")
		v=$((v + dv)) n=$((n + dn))
		t=$((t + $(awk '{print $14 + $15}' "$d/stat" 2>/dev/null || echo 0)))
	done
	echo $v $n $t
}
# the machine's user (+nice), system and softirq ticks
machine() { awk '$1 == "cpu" {print $2 + $3, $4, $8}' /proc/stat; }
packets() { $NS_SRV awk -v d="$DEV:" '$1 == d {print $3, $11}' /proc/net/dev; }

# The udp-* models: 8 clients of datagram round trips.
UDP=()
case $MODEL in udp-*) UDP=(--udp) ;; esac

PORT=19500
# one kernel|LIB: prints the run's line
one() {
	PORT=$((PORT == 19509 ? 19500 : PORT + 1))
	local pre=() label=kernel
	[ "$1" != kernel ] && pre=(env LD_PRELOAD="$1" "${EXTRA_ENV[@]}") label=libvma
	$NS_SRV "${pre[@]}" "$SRV" --port $PORT --bind 198.18.0.2 --model "$MODEL" --workers "$WORKERS" \
		--max-seconds 40 >"$TMP/srv.out" 2>"$TMP/srv.err" &
	local job=$!
	for _ in $(seq 100); do grep -q '^ready' "$TMP/srv.out" && break; sleep 0.1; done
	$NS_CLI timeout 30 "$CLI" --server 198.18.0.2 --port $PORT --conns 8 --seconds 5 "${UDP[@]}" >"$TMP/cli.out" 2>&1 &
	local cli=$!
	sleep 1
	local spid cpid
	spid=$(pgrep -f "^$SRV --port $PORT" | head -1)
	cpid=$(pgrep -f "^$CLI --server 198.18.0.2 --port $PORT" | head -1)
	if [ -z "$spid" ] || [ -z "$cpid" ]; then
		wait $cli; kill -TERM $job 2>/dev/null; wait $job 2>/dev/null
		echo "$label n/a"
		return
	fi
	local sv0 sn0 st0 cv0 cn0 ct0 rx0 tx0 sv1 sn1 st1 cv1 cn1 ct1 rx1 tx1
	read -r sv0 sn0 st0 < <(snap "$spid"); read -r cv0 cn0 ct0 < <(snap "$cpid"); read -r rx0 tx0 < <(packets)
	read -r mu0 ms0 mq0 < <(machine)
	sleep 3
	read -r sv1 sn1 st1 < <(snap "$spid"); read -r cv1 cn1 ct1 < <(snap "$cpid"); read -r rx1 tx1 < <(packets)
	read -r mu1 ms1 mq1 < <(machine)
	wait $cli
	kill -TERM $job 2>/dev/null
	wait $job 2>/dev/null
	local rate
	rate=$(sed -n 's/^ok .*rate \([0-9]*\).*/\1/p' "$TMP/cli.out")
	if [ -z "$rate" ] || [ "$rate" -eq 0 ]; then
		echo "$label n/a"
		return
	fi
	# The client's rate covers its 5 s; the window is 3 s of it.
	awk -v l=$label -v r="$rate" -v hz="$HZ" -v sv=$((sv1 - sv0)) -v sn=$((sn1 - sn0)) -v st=$((st1 - st0)) \
		-v ct=$((ct1 - ct0)) -v rx=$((rx1 - rx0)) -v tx=$((tx1 - tx0)) \
		-v mu=$((mu1 - mu0)) -v ms=$((ms1 - ms0)) -v mq=$((mq1 - mq0)) 'BEGIN {
		n = r * 3; u = 1e6 / hz / n
		printf "%-7s rate %7d  srv_cpu %5.2f  cli_cpu %5.2f  srv_sleeps %.2f  srv_preempt %.2f  rx %.2f  tx %.2f" \
			"  usr %.2f  sys %.2f  sirq %.2f\n",
			l, r, st * u, ct * u, sv / n, sn / n, rx / n, tx / n, mu * u, ms * u, mq * u }'
}

echo "mp_split: $MODEL x$WORKERS ${EXTRA_ENV[*]}; per request (CPU in µs)"
for i in $(seq "$ROUNDS"); do
	one kernel
	one "$LIB"
done

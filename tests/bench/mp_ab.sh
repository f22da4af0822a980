#!/bin/bash
# mp_ab.sh LIB_A LIB_B [ROUNDS] [MODEL WORKERS [VAR=VALUE ...]]: two builds
# of libvma.so under one server of several threads or processes, for the
# before/after numbers of a change (issue "many processes"; mp_bench.sh
# gives the whole table for one build). Root; own testbed (TB_PREFIX,
# default vmamab). Alternating the kernel, A and B, ROUNDS (3) times:
# tests/integration/mp_server --model MODEL (threads) --workers WORKERS (4)
# in one namespace, loaded by mp_client from the other (8 connections of
# 64-byte request/echo round trips, BENCH_SECONDS (4) each; for the udp-*
# models 8 clients of 64-byte datagram round trips). Prints per run
# the rate and the server's CPU time per request (user + system of every
# process of the server, from /proc, over the last BENCH_SECONDS - 1
# seconds), then the medians and each build's ratio to the kernel.
# VAR=VALUE words are more environment for the libvma runs
# (e.g. VMA_RING_ALLOCATION_LOGIC_RX=20); --option=value words are
# mp_server options for every run (e.g. --work-us=20). ENV_A and ENV_B (VAR=VALUE words)
# are more environment for the runs of A and of B alone: with A and B the
# same library they compare two settings of one build.
# A libvma run whose requests reached the server namespace's kernel TCP
# (more than 1000 segments: the library was not offloading, say because
# no vmad was found beside a copied libvma.so) stops the script with exit 2
# rather than reporting kernel numbers as libvma's.
# Exit 0 when it ran, 2 when it could not set up or a run was not offloaded.
set -u
[ $# -ge 2 ] || { echo "usage: $0 LIB_A LIB_B [ROUNDS] [MODEL WORKERS [VAR=VALUE ...]]" >&2; exit 2; }
LIB_A=$(readlink -f "$1") LIB_B=$(readlink -f "$2") ROUNDS=${3:-3} MODEL=${4:-threads} WORKERS=${5:-4}
shift $(($# < 5 ? $# : 5))
# Words of the form --option=value are mp_server options for every run,
# the kernel's too (e.g. --work-us=20); the others are environment.
EXTRA_ENV=() SRV_OPTS=()
for w in "$@"; do
	case $w in --*=*) SRV_OPTS+=("${w%%=*}" "${w#*=}") ;; --*) SRV_OPTS+=("$w") ;; *) EXTRA_ENV+=("$w") ;; esac
done
TOP=$(cd "$(dirname "$0")/../.." && pwd)
. "$TOP/tests/bench/bench_stats.sh"
BUILD=${BUILDDIR:-$TOP/build}
SRV=$BUILD/tests/integration/mp_server CLI=$BUILD/tests/integration/mp_client
SECS=${BENCH_SECONDS:-4}
[ "$(id -u)" = 0 ] || { echo "mp_ab: needs root (namespaces)" >&2; exit 2; }
for f in "$LIB_A" "$LIB_B" "$SRV" "$CLI"; do [ -f "$f" ] || { echo "mp_ab: no $f" >&2; exit 2; }; done
[ "$SECS" -ge 2 ] || { echo "mp_ab: BENCH_SECONDS must be 2 or more" >&2; exit 2; }
export TB_PREFIX=${TB_PREFIX:-vmamab}
bash "$TOP/contrib/testbed.sh" up pair >/dev/null || exit 2
TMP=$(mktemp -d)
trap 'pkill -f "$SRV --port 1940[0-9]" 2>/dev/null; bash "$TOP/contrib/testbed.sh" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
trap 'exit 143' TERM INT
NS_CLI="nsenter --net=/run/netns/$TB_PREFIX-a" NS_SRV="nsenter --net=/run/netns/$TB_PREFIX-b"
HZ=$(getconf CLK_TCK)

# The udp-* models: the client sends datagrams, and the offload check
# counts the kernel's Udp InDatagrams instead of Tcp InSegs.
UDP=()
case $MODEL in udp-*) UDP=(--udp) ;; esac
kernel_rx() {
	if [ ${#UDP[@]} -gt 0 ]; then
		$NS_SRV awk '/^Udp:/{n++; if (n == 2) print $2}' /proc/net/snmp
	else
		$NS_SRV awk '/^Tcp:/{n++; if (n == 2) print $11}' /proc/net/snmp
	fi
}
server_ticks() { # user + system clock ticks of every process of the server on PORT
	local t=0 p
	for p in $(pgrep -f "$SRV --port $1"); do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
	done
	echo $t
}

# A private vmad the previous run's library started may still linger in the
# server namespace: A and B may speak different vmad protocol versions, and
# the other build's vmad would refuse the next run (kernel path).
vmad_stop() {
	local p
	for p in $(ip netns pids "$TB_PREFIX-b" 2>/dev/null); do
		[ "$(cat "/proc/$p/comm" 2>/dev/null)" = vmad ] && kill -TERM "$p" 2>/dev/null
	done
	for _ in $(seq 50); do
		p=$(for q in $(ip netns pids "$TB_PREFIX-b" 2>/dev/null); do cat "/proc/$q/comm" 2>/dev/null; done | grep -c '^vmad$')
		[ "$p" = 0 ] && break
		sleep 0.1
	done
}

PORT=19400
read -r -a ENV_A_WORDS <<<"${ENV_A:-}"
read -r -a ENV_B_WORDS <<<"${ENV_B:-}"
# one LIB|kernel [VAR=VALUE...]: prints "RATE US_PER_REQUEST ACCEPTED"
# ("n/a n/a -" on failure); ACCEPTED: the connections each worker accepted,
# slash-separated (where accept() put the 8 clients), then the busiest
# worker's share of the requests.
one() {
	PORT=$((PORT == 19409 ? 19400 : PORT + 1))
	local pre=()
	[ "$1" != kernel ] && pre=(env LD_PRELOAD="$1" "${EXTRA_ENV[@]}" "${@:2}") && vmad_stop
	$NS_SRV "${pre[@]}" "$SRV" --port $PORT --bind 198.18.0.2 --model "$MODEL" --workers "$WORKERS" \
		--max-seconds $((SECS + 30)) "${SRV_OPTS[@]}" >"$TMP/srv.out" 2>"$TMP/srv.err" &
	local job=$!
	for _ in $(seq 100); do grep -q '^ready' "$TMP/srv.out" && break; sleep 0.1; done
	local segs0 t0 t1 out
	segs0=$(kernel_rx)
	$NS_CLI timeout $((SECS + 20)) "$CLI" --server 198.18.0.2 --port $PORT --conns 8 --seconds "$SECS" "${UDP[@]}" \
		>"$TMP/cli.out" 2>&1 &
	local cli=$!
	sleep 1
	t0=$(server_ticks $PORT)
	wait $cli
	t1=$(server_ticks $PORT)
	local segs=$(($(kernel_rx) - segs0))
	kill -TERM $job 2>/dev/null
	wait $job 2>/dev/null
	out=$(cat "$TMP/cli.out")
	local acc
	acc=$(awk '/^worker [0-9]+ accepted/ { a = a (a == "" ? "" : "/") $4; r += $6; if ($6 > top) top = $6 }
		END { if (a != "") printf "%s,top%d%%", a, r ? 100 * top / r : 0 }' "$TMP/srv.out")
	local rate req
	rate=$(echo "$out" | sed -n 's/^ok .*rate \([0-9]*\).*/\1/p')
	req=$(echo "$out" | sed -n 's/^ok requests \([0-9]*\) .*/\1/p')
	if [ "$1" != kernel ] && [ "$segs" -gt 1000 ]; then
		echo "mp_ab: $1: $segs TCP segments reached the server's kernel: not offloaded; its warnings:" >&2
		grep -E 'WARNING|ERROR' "$TMP/srv.err" | head -5 >&2
		echo "abort"
		return
	fi
	if [ -z "$rate" ] || [ -z "$req" ] || [ "$req" -eq 0 ]; then
		echo "n/a n/a -"
		return
	fi
	# The ticks cover the last SECS - 1 seconds of the run: as many of
	# its requests.
	awk -v r="$rate" -v t=$((t1 - t0)) -v n="$req" -v s="$SECS" -v hz="$HZ" \
		-v acc="${acc:--}" 'BEGIN { printf "%s %.2f %s\n", r, t * 1e6 / hz / (n * (s - 1) / s), acc }'
}

declare -a K KU A AU B BU
echo "mp_ab: $MODEL x$WORKERS ${SRV_OPTS[*]} ${EXTRA_ENV[*]}${ENV_A:+; A: $ENV_A}${ENV_B:+; B: $ENV_B}; rate/s (server CPU us per request) [connections each worker accepted,busiest worker's share of requests]"
for i in $(seq "$ROUNDS"); do
	read -r k ku kc < <(one kernel)
	read -r a au ac < <(one "$LIB_A" "${ENV_A_WORDS[@]}")
	[ "$a" = abort ] && exit 2
	read -r b bu bc < <(one "$LIB_B" "${ENV_B_WORDS[@]}")
	[ "$b" = abort ] && exit 2
	printf 'round %d: kernel %s (%s) [%s]  A %s (%s) [%s]  B %s (%s) [%s]\n' "$i" "$k" "$ku" "$kc" "$a" "$au" "$ac" \
		"$b" "$bu" "$bc"
	K+=("$k") KU+=("$ku") A+=("$a") AU+=("$au") B+=("$b") BU+=("$bu")
done
k=$(median "${K[@]}") a=$(median "${A[@]}") b=$(median "${B[@]}")
printf 'median: kernel %s (%s)  A %s (%s, %sx)  B %s (%s, %sx)\n' "$k" "$(median "${KU[@]}")" "$a" \
	"$(median "${AU[@]}")" "$(ratio_of "$a" "$k")" "$b" "$(median "${BU[@]}")" "$(ratio_of "$b" "$k")"

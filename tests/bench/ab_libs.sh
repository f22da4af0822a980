#!/bin/bash
# ab_libs.sh LIB_A LIB_B [ROUNDS]: two builds of libvma.so side by side, for
# the before/after numbers of a change (issue "Architecture": TCP ping-pong
# and iperf3 server CPU per segment). Root; own testbed namespaces (TB_PREFIX,
# default vmaab). Alternating A and B, ROUNDS (3) times:
#   tcp_pp64: sockperf ping-pong --tcp, 64 B, 4 s, libvma (VMA_SPEC=latency)
#             on both ends: the average half round trip in us (busy-polling
#             ends: CPU per round trip follows it);
#   iperf3:   one stream for 4 s from a kernel client to an iperf3 server
#             under libvma: MB/s, the server process's CPU seconds (user +
#             system, its internal thread included) and those per 1448-byte
#             segment received.
# Only ratios within one run mean anything: the host's load moves both.
# Exit 0 when it ran, 2 when it could not set up.
set -u
[ $# -ge 2 ] || { echo "usage: $0 LIB_A LIB_B [ROUNDS]" >&2; exit 2; }
LIB_A=$(readlink -f "$1") LIB_B=$(readlink -f "$2") ROUNDS=${3:-3}
TOP=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "ab_libs: needs root (namespaces)" >&2; exit 2; }
for f in "$LIB_A" "$LIB_B"; do [ -f "$f" ] || { echo "ab_libs: no $f" >&2; exit 2; }; done
for p in sockperf iperf3 python3 /usr/bin/time; do
	command -v "$p" >/dev/null || { echo "ab_libs: needs $p" >&2; exit 2; }
done
export TB_PREFIX=${TB_PREFIX:-vmaab}
bash "$TOP/contrib/testbed.sh" up pair >/dev/null || exit 2
TMP=$(mktemp -d)
trap 'bash "$TOP/contrib/testbed.sh" down >/dev/null 2>&1; rm -rf "$TMP"' EXIT
trap 'exit 143' TERM INT
NS_SRV="nsenter --net=/run/netns/$TB_PREFIX-a" NS_CLI="nsenter --net=/run/netns/$TB_PREFIX-b"
SRV_IP=198.18.0.1

pingpong() {  # LIB -> average half round trip (us)
	$NS_SRV env LD_PRELOAD="$1" VMA_SPEC=latency sockperf server --tcp -i $SRV_IP -p 11111 >/dev/null 2>&1 &
	local srv=$!
	sleep 1
	$NS_CLI env LD_PRELOAD="$1" VMA_SPEC=latency sockperf ping-pong --tcp -i $SRV_IP -p 11111 -m 64 -t 4 2>&1 |
		sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' | tail -1
	kill $srv 2>/dev/null
	wait $srv 2>/dev/null
}

srv_in_segs() { $NS_SRV awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp; }

bulk() {  # LIB -> "MB/s, CPU s, ns per segment" of the iperf3 server
	# Bound to the IPv4 address: iperf3's default listener is IPv6 (::),
	# which libvma leaves to the kernel (README, "Not yet").
	$NS_SRV /usr/bin/time -f "%U %S" -o "$TMP/time" env LD_PRELOAD="$1" iperf3 -s -1 -B $SRV_IP -p 5211 \
		>/dev/null 2>&1 &
	local srv=$! bytes user sys in0 in1
	sleep 1
	in0=$(srv_in_segs)
	bytes=$($NS_CLI iperf3 -c $SRV_IP -p 5211 -t 4 -J 2>/dev/null |
		python3 -c 'import json,sys; print(int(json.load(sys.stdin)["end"]["sum_received"]["bytes"]))' 2>/dev/null)
	wait $srv
	in1=$(srv_in_segs)
	read -r user sys <"$TMP/time"
	# The server namespace's kernel Tcp InSegs: flat when offloaded.
	awk -v b="${bytes:-0}" -v u="$user" -v s="$sys" -v k=$((in1 - in0)) 'BEGIN {
		if (b <= 0) { print "n/a"; exit }
		printf "%.0f MB/s, server CPU %.2f s, %.0f ns per segment, server kernel InSegs +%d\n",
			b / 4e6, u + s, (u + s) * 1e9 / (b / 1448), k }'
}

echo "A: $LIB_A"
echo "B: $LIB_B"
for r in $(seq "$ROUNDS"); do
	for which in A B; do
		lib=$LIB_A
		[ $which = B ] && lib=$LIB_B
		echo "round $r $which: tcp_pp64 avg $(pingpong "$lib") us; iperf3 $(bulk "$lib")"
	done
done

#!/bin/bash
# sockperf 64 B: ping-pong latency and throughput, kernel vs libvma (both
# ends), in one run on a private testbed. Prints the numbers and the ratio.
set -u
LIB=$(readlink -f "${1:-$(dirname "$0")/../../src/vma/.libs/libvma.so}")
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_PREFIX=vmaudpm
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || exit 77
trap 'bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1' EXIT
A="nsenter --net=/run/netns/vmaudpm-a"; B="nsenter --net=/run/netns/vmaudpm-b"
$A ethtool -K vmaudpm-a0 tx off >/dev/null 2>&1; $B ethtool -K vmaudpm-b0 tx off >/dev/null 2>&1
VMA="env LD_PRELOAD=$LIB VMA_TRACELEVEL=2"
run() {  # $1 prefix (empty = kernel), $2 mode pp|tp, $3 port
	$B $1 sockperf sr -i 198.18.0.2 -p $3 >/tmp/udp_measure_srv.$$ 2>&1 & local srv=$!
	sleep 1
	$A $1 timeout 30 sockperf $2 -i 198.18.0.2 -p $3 -t 3 -m 64 2>&1
	kill -INT $srv; wait $srv 2>/dev/null
	[ $2 = tp ] && grep -E "Total of|received" /tmp/udp_measure_srv.$$ | tail -2 >&2
	rm -f /tmp/udp_measure_srv.$$
}
k=$(run "" pp 14001 | grep -E "avg-latency|percentile (50|99).000"); echo "kernel pp: $k" | tr '\n' ' '; echo
v=$(run "$VMA" pp 14002 | grep -E "avg-latency|percentile (50|99).000"); echo "libvma pp: $v" | tr '\n' ' '; echo
ka=$(echo "$k" | grep -o "avg-latency=[0-9.]*" | cut -d= -f2); va=$(echo "$v" | grep -o "avg-latency=[0-9.]*" | cut -d= -f2)
echo "latency ratio libvma/kernel = $(echo "scale=3; $va / $ka" | bc)"
echo "kernel tp:"; run "" tp 14003 | grep -E "Summary|Total|dropped" 
echo "libvma tp:"; run "$VMA" tp 14004 | grep -E "Summary|Total|dropped"

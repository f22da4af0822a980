#!/bin/bash
# Traffic to a secondary address of an offloaded interface (issue 12 item 8).
# Usage: secondary_addr.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# Our stack answers for the interface's primary address only, so the
# steering must leave every other address of the interface to the kernel:
# a wildcard (0.0.0.0) TCP listener under libvma in SEC-b (198.18.0.2,
# secondary 198.18.0.12 added before the server starts) is reached by a
# kernel client in SEC-a on both addresses, a wildcard UDP socket on the
# primary and one bound to the secondary on that one: every echo
# intact; the primary's traffic offloaded (the server namespace's kernel
# Tcp InSegs / Udp InDatagrams flat), the secondary's through the kernel
# socket (the counters move). Were the secondary steered to us, the stack
# would drop it and the client would time out.
set -u
BUILD=${1:?usage: secondary_addr.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq   # mp_server and mp_client are not built here: SKIP without them
SRV_BIN=$BUILD/tests/integration/mp_server
CLI=$BUILD/tests/integration/mp_client
pair_need "$SRV_BIN" "$CLI"
TB_PREFIX_OVERRIDE=${SEC_TB_PREFIX:-}
PIDS=()
pair_extra_cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}
trap 'exit 143' TERM INT
pair_up sec secondary_addr
$B ip addr add 198.18.0.12/24 dev "$TB_PREFIX-b0" || { echo "SKIP: cannot add the secondary address"; exit 77; }
counter() {  # counter Tcp|Udp FIELD: the server namespace's kernel counter
	$B awk -v p="$1:" -v f="$2" '$1 == p { n++; if (n == 1) for (i = 1; i <= NF; i++) col[$i] = i;
		if (n == 2) print $(col[f]) }' /proc/net/snmp
}

start_server() {  # start_server NAME ARGS...
	local name=$1; shift
	$B env LD_PRELOAD="$LIB" VMA_TRACELEVEL=2 "$SRV_BIN" --max-seconds 60 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
	PIDS+=("$!")
	for _ in $(seq 100); do grep -q '^ready' "$WORK/$name.out" && return 0; sleep 0.1; done
	echo "FAIL: $name server not ready"; sed 's/^/  /' "$WORK/$name.err" | head -5
	exit 1
}

start_server tcp --port 15000 --model single
start_server udp --port 15001 --model udp-shared --workers 1
# A wildcard UDP socket answers from the route's source (the primary), with
# or without libvma, so the secondary is served by a socket bound to it.
start_server udp2 --port 15002 --bind 198.18.0.12 --model udp-shared --workers 1
for run in "tcp 15000 198.18.0.2" "tcp 15000 198.18.0.12" "udp 15001 198.18.0.2" "udp 15002 198.18.0.12"; do
	set -- $run
	proto=$1 port=$2 ip=$3
	if [ $proto = tcp ]; then what="Tcp InSegs"; extra=""; else what="Udp InDatagrams"; extra="--udp"; fi
	before=$(counter $what)
	out=$($A timeout 30 "$CLI" --server $ip --port $port --conns 4 --requests 200 $extra 2>&1)
	rc=$?
	after=$(counter $what)
	delta=$((after - before))
	check $rc "$proto to $ip: $out"
	if [ $ip = 198.18.0.2 ]; then
		[ $delta -lt 40 ]; check $? "$proto to the primary address offloaded (kernel $what +$delta)"
	else
		[ $delta -ge 800 ]; check $? "$proto to the secondary address through the kernel socket (kernel $what +$delta)"
	fi
done
exit $fail

#!/bin/bash
# 64 MiB TCP streams through a lossy router (root; private testbed TB_PREFIX=tstr, or $TSTR_PREFIX).
# Usage: tcp_stream.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# Topology: contrib/testbed.sh up routed (client tstr-c 198.18.1.1, router
# tstr-r, server tstr-s 198.18.2.1) + impair 1 1: the router drops 1% and
# duplicates 1% of what it forwards (nft numgen).
# Transfers (tcp_stream program, blocking I/O, varied write/read sizes):
#   kernel -> kernel (baseline), kernel -> libvma, libvma -> kernel,
#   libvma -> libvma, and libvma server -> kernel client (server sends).
# Checks per transfer: both ends exit 0 within 120 s; byte count = 64 MiB on
# both ends; receiver sha256 = sender sha256 = sha256sum of the generated
# stream; in each libvma namespace the kernel's Tcp InSegs grows by less than
# 1/50 of the segments transferred (the traffic went through libvma); the
# router's nft counters show drops and duplicates during the transfer.
# TSTR_KERNEL_ONLY=1 runs every pairing with both ends on the kernel and then
# requires the InSegs growth instead (shows the offload check can fail).
# TSTR_BYTES overrides the stream size.
set -u
BUILD=${1:?usage: tcp_stream.sh BUILDDIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BUILD=$(cd "$BUILD" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
TESTBED="$HERE/../../contrib/testbed.sh"
LIB=$BUILD/src/vma/.libs/libvma.so
PROG=$BUILD/tests/integration/tcp_stream
KERNEL_ONLY=${TSTR_KERNEL_ONLY:-0}
BYTES=${TSTR_BYTES:-$((64 << 20))}
TIMEOUT=120
[ -x "$PROG" ] || make -C "$BUILD" -s tests/integration/tcp_stream >/dev/null ||
	{ echo "FAIL: cannot build tests/integration/tcp_stream"; exit 1; }
[ "$KERNEL_ONLY" = 1 ] || [ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: needs nft"; exit 77; }

export TB_PREFIX=${TSTR_PREFIX:-tstr}
TMP=$(mktemp -d /tmp/tstr.XXXXXX)
cleanup() {
	bash "$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
bash "$TESTBED" up routed >/dev/null || { echo "SKIP: testbed up routed failed"; exit 77; }
bash "$TESTBED" impair 1 1 >/dev/null || { echo "FAIL: testbed impair 1 1"; exit 1; }

if [ "$KERNEL_ONLY" = 1 ]; then
	VMA=""
	echo "mode: kernel only (every 'libvma' end runs on the kernel; offload checks inverted)"
else
	VMA="env LD_PRELOAD=$LIB"
	echo "mode: libvma $LIB"
fi
CLIENT_NS=/run/netns/$TB_PREFIX-c
SERVER_NS=/run/netns/$TB_PREFIX-s
SERVER_ADDR=198.18.2.1
SEGMENTS=$((BYTES / 1448))
FLAT_LIMIT=$((SEGMENTS / 50))
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

tcp_in_segs() { nsenter --net="$1" awk '/^Tcp:/{n++; if (n == 2) print $11}' /proc/net/snmp; }
# Packet counters of the three impair rules: dup to server, dup to client, drop.
nft_counters() {
	nsenter --net=/run/netns/$TB_PREFIX-r nft list table ip vmatb |
		grep -o 'counter packets [0-9]*' | awk '{printf "%s ", $3} END {print ""}'
}
expected_sha() { "$PROG" gen "$BYTES" "$1" | sha256sum | cut -d' ' -f1; }
field() { awk -v k="$2" '{for (i = 1; i < NF; i++) if ($i == k) print $(i + 1)}' "$1"; }

# transfer LABEL SENDER(client|server) CLIENT_SIDE SERVER_SIDE PORT; a side
# is kernel or vma (the program runs under LD_PRELOAD unless KERNEL_ONLY).
transfer() {
	local label=$1 sender=$2 cside=$3 sside=$4 port=$5
	local cenv="" senv=""
	[ "$cside" = vma ] && cenv=$VMA
	[ "$sside" = vma ] && senv=$VMA
	local smode=recv cmode=send
	[ "$sender" = server ] && smode=send cmode=recv
	local seed=$port ready=$TMP/ready.$port out=$TMP/$port
	echo "== $label ($BYTES bytes, $sender sends)"
	timeout $TIMEOUT nsenter --net=$SERVER_NS $senv "$PROG" $smode listen $SERVER_ADDR "$port" \
		-n "$BYTES" -s "$seed" -r "$ready" >"$out.srv" 2>"$out.srv.err" &
	local srv=$!
	for _ in $(seq 100); do [ -e "$ready" ] && break; sleep 0.1; done
	if [ ! -e "$ready" ]; then
		check 1 "$label: server listening"
		kill $srv 2>/dev/null; wait $srv 2>/dev/null
		tail -5 "$out.srv.err"
		return
	fi
	local c_in0 s_in0 nft0 t0
	c_in0=$(tcp_in_segs $CLIENT_NS) s_in0=$(tcp_in_segs $SERVER_NS) nft0=$(nft_counters)
	t0=$(date +%s.%N)
	timeout $TIMEOUT nsenter --net=$CLIENT_NS $cenv "$PROG" $cmode connect $SERVER_ADDR "$port" \
		-n "$BYTES" -s "$seed" >"$out.cli" 2>"$out.cli.err"
	local crc=$?
	wait $srv
	local src=$?
	local secs c_in s_in nft1
	secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
	c_in=$(( $(tcp_in_segs $CLIENT_NS) - c_in0 )) s_in=$(( $(tcp_in_segs $SERVER_NS) - s_in0 ))
	nft1=$(nft_counters)
	local sender_out=$out.cli receiver_out=$out.srv
	[ "$sender" = server ] && sender_out=$out.srv receiver_out=$out.cli
	local rc_msg="client exit $crc, server exit $src"
	[ $crc = 124 ] || [ $src = 124 ] && rc_msg="$rc_msg (timed out after ${TIMEOUT}s)"
	[ $crc = 0 ] && [ $src = 0 ]; check $? "$label: both ends complete ($rc_msg)"
	if [ $crc != 0 ] || [ $src != 0 ]; then
		echo "   client stderr:"; tail -5 "$out.cli.err" | sed 's/^/     /'
		echo "   server stderr:"; tail -5 "$out.srv.err" | sed 's/^/     /'
	fi
	local sbytes rbytes ssha rsha want
	sbytes=$(field "$sender_out" bytes) rbytes=$(field "$receiver_out" bytes)
	ssha=$(field "$sender_out" sha256) rsha=$(field "$receiver_out" sha256)
	want=$(expected_sha "$seed")
	[ "$sbytes" = "$BYTES" ] && [ "$rbytes" = "$BYTES" ]
	check $? "$label: byte count sent ${sbytes:-none}, received ${rbytes:-none}, want $BYTES"
	[ "$ssha" = "$want" ] && [ "$rsha" = "$want" ]
	check $? "$label: sha256 received ${rsha:0:16}.. = sent ${ssha:0:16}.. = generated ${want:0:16}.. (full compare)"
	local mbps
	mbps=$(awk -v n="$BYTES" -v t="$secs" 'BEGIN {printf "%.1f", (t > 0) ? n / t / 1e6 : 0}')
	echo "   time $secs s, $mbps MB/s (wall clock incl. connect/close);" \
		"receiver says $(field "$receiver_out" MBps) MB/s"
	# Router impairment during this transfer.
	local d_srv d_cli drops
	read -r d_srv d_cli drops <<<"$(paste -d' ' <(echo $nft1 | tr ' ' '\n') <(echo $nft0 | tr ' ' '\n') |
		awk '{printf "%d ", $1 - $2}')"
	local dups=$d_srv
	[ "$sender" = server ] && dups=$d_cli
	[ "${drops:-0}" -gt 0 ] && [ "${dups:-0}" -gt 0 ]
	check $? "$label: router dropped $drops and duplicated $dups data-direction packets (+$(( ${d_srv:-0} + ${d_cli:-0} - dups )) the other way)"
	# Proof of offload from the kernel's TCP counters.
	local side ns_in kind
	for side in client server; do
		if [ $side = client ]; then ns_in=$c_in kind=$cside; else ns_in=$s_in kind=$sside; fi
		[ "$kind" = vma ] || continue
		if [ "$KERNEL_ONLY" = 1 ]; then
			[ "$ns_in" -ge "$FLAT_LIMIT" ]
			check $? "$label: $side on the kernel: Tcp InSegs grew by $ns_in >= $FLAT_LIMIT (the offload check would catch it)"
		else
			[ "$ns_in" -lt "$FLAT_LIMIT" ]
			check $? "$label: $side under libvma: kernel Tcp InSegs grew by $ns_in < $FLAT_LIMIT (~$SEGMENTS data segments)"
		fi
	done
}

if [ "$KERNEL_ONLY" = 1 ] || [ "${TSTR_BASELINE:-1}" = 1 ]; then
	transfer "kernel -> kernel (baseline)" client kernel kernel 15001
fi
transfer "kernel client -> libvma server" client kernel vma 15002
transfer "libvma client -> kernel server" client vma kernel 15003
transfer "libvma client -> libvma server" client vma vma 15004
transfer "libvma server -> kernel client (server sends)" server kernel vma 15005
[ $fail = 0 ] && echo "tcp_stream: all checks passed" || echo "tcp_stream: FAILED"
exit $fail

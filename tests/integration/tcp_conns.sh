#!/bin/bash
# 1000 concurrent TCP connections on one epoll server (root; testbed TB_PREFIX=tstr2, or $TSTR_PREFIX).
# Usage: tcp_conns.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tcp_conns program: the client (tstr2-a, 198.18.0.1) opens N=1000 connections
# at once, sends a distinct message on each, verifies the echo, closes 500
# with FIN and 500 with SO_LINGER {1,0} (RST). The server (tstr2-b, 198.18.0.2)
# is one epoll loop with a non-blocking accept.
# Runs: kernel <-> kernel (baseline, level-triggered), kernel client ->
# libvma server (level-triggered), libvma client -> kernel server,
# libvma <-> libvma (edge-triggered).
# Checks per run: client exit 0 (every connect/echo right); the server counts
# exactly accepted 1000, echoed 1000, EOF 500, ECONNRESET 500, other 0; in
# each libvma namespace the kernel's Tcp InSegs grows by less than N/2 (the
# connections went through libvma); the control segments a kernel end
# receives are exact (N SYN, N/2 FIN, N/2 RST at the server; N SYN-ACK, N/2
# FIN at the client: nothing resent on a loss-free link). Prints the
# connection setup rate.
# TSTR_KERNEL_ONLY=1 runs the libvma ends on the kernel and requires InSegs
# growth instead (shows the offload check can fail). TSTR_CONNS overrides N.
set -u
BUILD=${1:?usage: tcp_conns.sh BUILDDIR}
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
BUILD=$(cd "$BUILD" && pwd)
LIB=$BUILD/src/vma/.libs/libvma.so
PROG=$BUILD/tests/integration/tcp_conns
KERNEL_ONLY=${TSTR_KERNEL_ONLY:-0}
N=${TSTR_CONNS:-1000}
TIMEOUT=60
[ -x "$PROG" ] || make -C "$BUILD" -s tests/integration/tcp_conns >/dev/null ||
	{ echo "FAIL: cannot build tests/integration/tcp_conns"; exit 1; }
[ "$KERNEL_ONLY" = 1 ] || [ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }

TB_PREFIX_OVERRIDE=${TSTR_PREFIX:-}
. "$(dirname "$0")/pair_lib.sh"
pair_up tstr2 tstr2

if [ "$KERNEL_ONLY" = 1 ]; then
	VMA=""
	echo "mode: kernel only (every 'libvma' end runs on the kernel; offload checks inverted)"
else
	VMA="env LD_PRELOAD=$LIB"
	echo "mode: libvma $LIB"
fi
CLIENT_NS=/run/netns/$TB_PREFIX-a
SERVER_NS=/run/netns/$TB_PREFIX-b
SERVER_ADDR=198.18.0.2
FLAT_LIMIT=$((N / 2))
tcp_in_segs() { nsenter --net="$1" awk '/^Tcp:/{n++; if (n == 2) print $11}' /proc/net/snmp; }

# Control segments a kernel end receives (nft input hook; a libvma end's
# packets bypass its own netfilter, so only kernel ends are counted). The
# link loses nothing, so every count is exact: no SYN or FIN is resent.
wire_count_reset() {
	local ns
	for ns in $CLIENT_NS $SERVER_NS; do
		nsenter --net=$ns nft delete table ip tstrwire 2>/dev/null
		nsenter --net=$ns nft -f - <<-EOF
		table ip tstrwire {
			chain input {
				type filter hook input priority -10; policy accept;
				tcp flags & (syn | ack) == syn counter
				tcp flags & (syn | ack) == syn | ack counter
				tcp flags & fin == fin counter
				tcp flags & rst == rst counter
			}
		}
		EOF
	done
}
# wire_counts NS -> "SYN SYNACK FIN RST"
wire_counts() {
	nsenter --net="$1" nft list table ip tstrwire | grep -o 'counter packets [0-9]*' |
		awk '{printf "%s%s", sep, $3; sep = " "} END {print ""}'
}

# run_conns LABEL CLIENT_SIDE SERVER_SIDE PORT [SERVER_FLAGS]; side = kernel|vma
run_conns() {
	local label=$1 cside=$2 sside=$3 port=$4 sflags=${5:-}
	local cenv="" senv="" ready=$WORK/ready.$port out=$WORK/$port
	[ "$cside" = vma ] && cenv=$VMA
	[ "$sside" = vma ] && senv=$VMA
	echo "== $label ($N connections, server $([ -n "$sflags" ] && echo edge || echo level)-triggered)"
	local c_in0 s_in0
	wire_count_reset
	c_in0=$(tcp_in_segs $CLIENT_NS) s_in0=$(tcp_in_segs $SERVER_NS)
	timeout $TIMEOUT nsenter --net=$SERVER_NS $senv "$PROG" server $SERVER_ADDR "$port" "$N" \
		$sflags -r "$ready" >"$out.srv" 2>"$out.srv.err" &
	local srv=$!
	for _ in $(seq 100); do [ -e "$ready" ] && break; sleep 0.1; done
	if [ ! -e "$ready" ]; then
		check 1 "$label: server listening"
		kill $srv 2>/dev/null; wait $srv 2>/dev/null
		tail -5 "$out.srv.err"
		return
	fi
	timeout $TIMEOUT nsenter --net=$CLIENT_NS $cenv "$PROG" client $SERVER_ADDR "$port" "$N" \
		>"$out.cli" 2>"$out.cli.err"
	local crc=$?
	wait $srv
	local src=$?
	local c_in=$(( $(tcp_in_segs $CLIENT_NS) - c_in0 )) s_in=$(( $(tcp_in_segs $SERVER_NS) - s_in0 ))
	sed 's/^/   /' "$out.cli"
	local note=""
	[ $crc = 124 ] && note=", timed out after ${TIMEOUT}s"
	[ $crc = 0 ]; check $? "$label: client: every connect and echo right (exit $crc$note)"
	local want="server accepted $N echoed $N eof $((N / 2)) reset $((N - N / 2)) other 0"
	local got
	got=$(grep -o 'server accepted .* other [0-9]*' "$out.srv")
	[ $src = 0 ] && [ "$got" = "$want" ]
	check $? "$label: ${got:-server printed nothing} (want: ${want#server }; exit $src)"
	if [ $crc != 0 ] || [ $src != 0 ]; then
		echo "   client stderr:"; sort "$out.cli.err" | uniq -c | sort -rn | head -5 | sed 's/^/     /'
		echo "   server stderr:"; sort "$out.srv.err" | uniq -c | sort -rn | head -5 | sed 's/^/     /'
	fi
	# What the far end put on the wire, seen by a kernel end: the server gets
	# N SYNs, N/2 FINs, N/2 RSTs (linger 0) and nothing else; the client gets
	# N SYN-ACKs and N/2 FINs (the server closes after EOF; after a reset it
	# has nothing left to send).
	local wire
	if [ "$sside" = kernel ] || [ "$KERNEL_ONLY" = 1 ]; then
		wire=$(wire_counts $SERVER_NS)
		[ "$wire" = "$N 0 $((N / 2)) $((N - N / 2))" ]
		check $? "$label: kernel server received SYN/SYN-ACK/FIN/RST $wire (want $N 0 $((N / 2)) $((N - N / 2)))"
	fi
	if [ "$cside" = kernel ] || [ "$KERNEL_ONLY" = 1 ]; then
		wire=$(wire_counts $CLIENT_NS)
		[ "$wire" = "0 $N $((N / 2)) 0" ]
		check $? "$label: kernel client received SYN/SYN-ACK/FIN/RST $wire (want 0 $N $((N / 2)) 0)"
	fi
	local side ns_in kind
	for side in client server; do
		if [ $side = client ]; then ns_in=$c_in kind=$cside; else ns_in=$s_in kind=$sside; fi
		[ "$kind" = vma ] || continue
		if [ "$KERNEL_ONLY" = 1 ]; then
			[ "$ns_in" -ge "$FLAT_LIMIT" ]
			check $? "$label: $side on the kernel: Tcp InSegs grew by $ns_in >= $FLAT_LIMIT (the offload check would catch it)"
		else
			[ "$ns_in" -lt "$FLAT_LIMIT" ]
			check $? "$label: $side under libvma: kernel Tcp InSegs grew by $ns_in < $FLAT_LIMIT"
		fi
	done
}

if [ "$KERNEL_ONLY" = 1 ] || [ "${TSTR_BASELINE:-1}" = 1 ]; then
	run_conns "kernel <-> kernel (baseline)" kernel kernel 16001
fi
run_conns "kernel client -> libvma server" kernel vma 16002
run_conns "libvma client -> kernel server" vma kernel 16003
run_conns "libvma client <-> libvma server" vma vma 16004 -e
[ $fail = 0 ] && echo "tcp_conns: all checks passed" || echo "tcp_conns: FAILED"
exit $fail

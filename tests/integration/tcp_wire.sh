#!/bin/bash
# TCP on the wire as Linux (issue 13), root: tests/integration/tcp_wire (see
# its header) runs its scenarios once on kernel sockets and once under
# libvma, against a kernel peer that captures the frames (AF_PACKET) on its
# veth; what the test side put on the wire, and its socket results, must
# match the kernel's run: exactly for options and flags (window scale with
# and without SO_RCVBUF, timestamps, SACK, MSS, ECN negotiation, ECT(0) and
# CWR, ETIMEDOUT from TCP_USER_TIMEOUT), within bounds for counts and times
# (quick ACKs at the connection start, the window auto-tuning reaches, the
# first retransmission, when the user timeout ends the connection).
# Usage: tcp_wire.sh [BUILDDIR | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Testbed prefix twire (TCP_WIRE_TB_PREFIX); the peer namespace asks for ECN
# (net.ipv4.tcp_ecn=1), marks CE on what the test side sends from port 9703,
# drops its data to port 9706, its 100th data packet to 9707 and its 9th and
# 10th to 9708; TCP_CORK on 9710 (one segment per corked response, as nginx
# sends them) (the rules are loaded again before each run: their counters
# restart).
# run.sh-timeout: 240
# run.sh-retry: 1 (times compared with the kernel's on a shared host)
set -u
ARG=${1:-$(dirname "$0")/../..}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "$ARG" ]; then BUILD=$ARG; LIB=$ARG/src/vma/.libs/libvma.so; else LIB=$ARG; BUILD=$(dirname "$LIB")/../../..; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: needs nft"; exit 77; }
LIB=$(readlink -f "$LIB")
PROG=$BUILD/tests/integration/tcp_wire
if [ ! -x "$PROG" ]; then
	PROG=$(mktemp /tmp/tcp_wire.XXXXXX)
	cc -std=gnu11 -O2 -o "$PROG" "$HERE/tcp_wire.c" -lpthread || { echo "SKIP: cannot build the helper"; exit 77; }
fi
export TB_PREFIX=${TCP_WIRE_TB_PREFIX:-twire}
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
TMP=$(mktemp -d)
peer=
cleanup() {
	[ -n "$peer" ] && kill "$peer" 2>/dev/null
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	# TCP_WIRE_KEEP=DIR keeps the runs' outputs (with TCP_WIRE_DUMP=PORT
	# the peer's log lists that port's frames)
	[ -n "${TCP_WIRE_KEEP:-}" ] && mkdir -p "$TCP_WIRE_KEEP" && cp "$TMP"/* "$TCP_WIRE_KEEP"/
	rm -rf "$TMP"
	case $PROG in /tmp/tcp_wire.*) rm -f "$PROG" ;; esac
}
trap cleanup EXIT
trap 'exit 143' TERM INT
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
# The drops count packets (the 100th to 9707, the 9th and 10th to 9708): with
# a default veth's TSO the kernel's run sends 64 KiB aggregates, fewer than
# 100 in 2 MiB, and lost nothing to compare (CI, default-offload pass).
# The comparison is per segment, so the test side segments as it sends.
$B ethtool -K "$TB_PREFIX-b0" tso off gso off >/dev/null 2>&1
$A sysctl -qw net.ipv4.tcp_ecn=1 || { echo "SKIP: net.ipv4.tcp_ecn in the peer namespace"; exit 77; }
rules() {
	$A nft delete table inet twire 2>/dev/null
	$A nft -f - <<-EOF
	table inet twire {
		chain pre {
			type filter hook prerouting priority -150; policy accept;
			tcp sport 9703 ip ecn ect0 ip ecn set ce
			tcp dport 9707 ip length > 100 numgen inc mod 1000000 99 drop
			tcp dport 9708 ip length > 100 numgen inc mod 1000000 8-9 drop
		}
		chain in {
			type filter hook input priority 0; policy accept;
			tcp dport 9706 ip length > 100 drop
		}
	}
	EOF
}
rules || { echo "SKIP: nft rules in the peer namespace"; exit 77; }
tcp_in_segs() { $B awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp; }

run() {  # $1 name, $2 test prefix (env ...); metrics to $TMP/$1.m
	local b0 b1 rc
	rules
	b0=$(tcp_in_segs)
	$A timeout 120 "$PROG" peer "$TB_PREFIX-a0" 198.18.0.1 198.18.0.2 >"$TMP/$1.peer" 2>&1 &
	peer=$!
	for _ in $(seq 50); do grep -q "peer ready" "$TMP/$1.peer" && break; sleep 0.1; done
	$B $2 timeout 100 "$PROG" test 198.18.0.1 198.18.0.2 >"$TMP/$1.test" 2>&1
	rc=$?
	wait "$peer"; peer=
	b1=$(tcp_in_segs)
	grep -h '^METRIC' "$TMP/$1.peer" "$TMP/$1.test" | awk '{print $2, $3}' >"$TMP/$1.m"
	grep -h '^INFO' "$TMP/$1.peer" "$TMP/$1.test" | sed "s/^/  [$1] /"
	echo "  [$1] test exit $rc, kernel TcpInSegs in the test namespace +$((b1 - b0))"
	echo $((b1 - b0)) >"$TMP/$1.segs"
	[ $rc = 0 ] || { sed "s/^/  [$1 test] /" "$TMP/$1.test" | tail -5; }
}
run kernel ""
# The kernel's run is the reference: one segment dropped in 2 MiB is one
# resent, the tail's two are two. A run that shows otherwise (seen once:
# 46 resent 30 us after their originals, on a loaded host) proves no
# scenario; it is run again, up to twice, before anything is compared.
for _ in 1 2; do
	[ "$(awk '$1 == "recovery_rexmits" {print $2}' "$TMP/kernel.m")" = 1 ] &&
		[ "$(awk '$1 == "tail_rexmits" {print $2}' "$TMP/kernel.m")" = 2 ] && break
	echo "  [kernel] the reference run lost other than the drops asked for: again"
	run kernel ""
done
run libvma "env LD_PRELOAD=$LIB VMA_TRACELEVEL=2"

fail=0 total=0 failed=0
check() {  # $1 ok (0/1), $2 text
	total=$((total + 1))
	if [ "$1" = 1 ]; then echo "PASS: $2"; else echo "FAIL: $2"; failed=$((failed + 1)); fail=1; fi
}
val() { awk -v k="$2" '$1 == k {print $2; exit}' "$TMP/$1.m"; }
segs=$(cat "$TMP/libvma.segs")
check "$([ "$segs" -lt 200 ] && echo 1)" "libvma run offloaded (kernel TcpInSegs +$segs < 200 in the test namespace)"
# exact: what a peer sees in the handshakes and flags, and the socket's error
for k in syn_wscale syn_timestamps syn_sackok syn_mss syn_ece_cwr syn_rcvbuf65536_wscale \
	synack_ecn_peer_wscale synack_ecn_peer_timestamps synack_ecn_peer_sackok synack_ecn_peer_mss \
	synack_ecn_peer_ece_cwr ecn_data_all_ect0 ecn_peer_echoed_ece ecn_cwr_sent user_timeout_etimedout \
	quickack_bytes drs_bytes recovery_rexmits tail_rexmits tail_probe_is_last \
	cork_segments cork_whole_responses cork_getsockopt; do
	kv=$(val kernel $k) vv=$(val libvma $k)
	check "$([ -n "$kv" ] && [ "$kv" = "$vv" ] && echo 1)" "$k: libvma $vv, kernel $kv"
done
# bounded: counts and times (the kernel's run proves the scenario)
bounded() {  # $1 key, $2 awk condition on k (kernel) and v (libvma), $3 text
	local kv vv ok
	kv=$(val kernel "$1") vv=$(val libvma "$1")
	ok=$(awk -v k="${kv:-nan}" -v v="${vv:-nan}" "BEGIN { print (k != \"nan\" && v != \"nan\" && ($2)) ? 1 : 0 }")
	check "$ok" "$1: libvma $vv, kernel $kv ($3)"
}
# The kernel's own count drops when its reader is descheduled (a loaded
# host: seen 5): ours must show the quick-ACK mode whatever it got.
bounded quickack_acks_first10 "v >= 8 && v >= k - 2" "quick ACKs: about one per segment at the start, as the kernel"
# the window follows how fast the application reads (bytes per receiver
# RTT), so a reader slower than the kernel's gets a smaller one, as Linux
# (the kernel's own figure fell to 218 KiB on a loaded host: not required).
# So the windows are compared per read rate: window times the time the
# 8 MiB took. Ours reads them in 60-90 ms here, the kernel in 4-14: on
# this host the kernel's first copy into each page of a new UMEM costs about
# 9 us (docs/xdp.md, "The first pass over a new domain's frames"); the next
# 8 MiB on the same domain take 6-11 ms,
# and CI of 2026-12-01 saw ours at 1.84 MB against the kernel's 12.46 MB
# (59 ms against 4): the plain ratio failed, the window per rate was twice
# the kernel's.
# On softverbs (the verbs backend's test device) every frame is copied
# through an AF_PACKET ring in the reader's own thread, so the reader is
# slower (8 MiB in 57 ms against the kernel's 35) and its window smaller:
# CI of 2026-11-28 saw 1.46 and 2.41 MB against the kernel's 11.1 and
# 10.2. There the window must open, not keep up with the kernel's.
if [ "${VMA_RING_BACKEND:-}" = verbs ]; then
	bounded drs_max_window "v >= 262144" "auto-tuning opens the window past 4 times the initial 64 KiB (softverbs: not compared with the kernel)"
else
	kt=$(val kernel drs_read_us) vt=$(val libvma drs_read_us)
	bounded drs_max_window "v >= 262144 && ${vt:-0} > 0 && ${kt:-0} > 0 && v * ${vt:-0} >= k * ${kt:-0} / 4" \
		"auto-tuning opens the window past 4 times the initial 64 KiB and, per read rate, at least a quarter as far as the kernel (8 MiB read in ${vt:-?} us, kernel ${kt:-?} us)"
fi
bounded user_timeout_first_rexmit_ms "k >= 150 && v >= k * 0.75 && v <= k * 1.5 + 50" "first retransmission of a lone segment at the RTO, as the kernel (min RTO 200 ms)"
bounded user_timeout_error_ms "k >= 900 && k <= 2500 && v >= 900 && v <= k + 500" "ETIMEDOUT at TCP_USER_TIMEOUT (1000 ms)"
# loss recovery (RACK-TLP, PRR): one loss found as fast as the kernel does
# (it waits for about three SACKs: RACK's window is 0 with DupThresh SACKed),
# the lost tail probed at Linux's PTO (2 * srtt + 2 ms, on the kernel's 4 ms
# jiffies), the answer without an RTO
# The delay is seen at the peer: from the original's arrival to the
# retransmission's. Ours finds the loss at the third SACK as the kernel (a
# debug trace in the stack showed it), but its retransmission queues behind
# the segments already in the XSK's TX ring (no TCP small queues; the peer
# sent up to ~90 ACKs, one per segment of ours, between the two), so the peer
# sees it a queue later: 0.1-1.2 ms on a quiet host against the kernel's
# 0.05-0.5. CI once saw 2.94 ms against the kernel's 0.07, when frame times
# were still the capture thread's (a descheduled capture thread was seen to
# bunch 2.9 ms of frames). The bound stays under the PTO of a 0.6 ms srtt
# plus slack, and one segment resent (above) shows RACK's, no probe, no RTO.
bounded recovery_delay_us "k > 0 && v > 0 && v <= k * 3 + 4000" "one loss in 2 MiB resent at the third SACK as the kernel, behind our TX queue"
bounded tail_probe_us "k > 0 && v > 0 && v <= k * 2 + 20000" "tail loss probe after the last segment, as the kernel's PTO (ours on the internal thread's 10 ms tick while the application sleeps)"
bounded tail_answer_ms "k < 100 && v < 100" "the lost tail recovered by probe and RACK, no RTO"
# TCP_CORK (nginx's responses): one 240-byte segment per response, as the
# kernel; without cork Nagle held each body behind its header until the
# peer's delayed ACK (about 40 ms a response, 2026-12-02); TCP_NODELAY set
# on a corked socket pushes at once (otherwise the 200 ms ceiling).
bounded cork_rounds_ms "v < 30" "three corked responses answered without a delayed-ACK wait (the kernel takes a few ms)"
bounded cork_nodelay_push_ms "v < 30" "TCP_NODELAY pushes corked bytes at once"
echo "tcp_wire: $total checks, $failed failed"
exit $fail

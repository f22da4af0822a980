#!/bin/bash
# Offloaded TCP socket semantics against the kernel as the reference (root).
# Usage: tcp_semantics.sh [BUILDDIR | path/to/libvma.so]   exit 0 pass, 1 fail, 77 skip.
# Runs tests/integration/tcp_semantics (see its header) on a private testbed
# (TB_PREFIX=tsem, or TCP_SEM_TB_PREFIX so two runs can share a machine; test
# side in tsem-b 198.18.0.2, peer in tsem-a 198.18.0.1):
#   kernel test vs kernel peer   (the reference: proves the expectations),
#   libvma test vs kernel peer   (our sockets in both roles against Linux),
#   kernel test vs libvma peer   (our sockets as the peer: RST, FIN, MSS seen by Linux),
#   libvma test vs libvma peer,
#   libvma test busy-polling (VMA_RX_POLL=-1 VMA_SELECT_POLL=-1) vs kernel
#   peer, signals section only: a handler that runs while we poll in user
#   space must interrupt or restart the call as Linux does,
#   libvma test with VMA_AVOID_SYS_CALLS_ON_TCP_FD=1 vs kernel peer, the
#   sections that set options, O_NONBLOCK and FIONBIO (accept data sockopts
#   keepalive): what libvma answers without the kernel must match Linux,
#   kernel and libvma test with the test namespace's route to the peer set to
#   "mtu 1400 advmss 1300" ("route"), routemss section only: the MSS our SYN
#   and SYN-ACK announce and the segments we send follow the route as Linux,
#   libvma test at VMA_TRACELEVEL=DEBUG, data section only ("exit"): when it
#   exits every ring must close with every buffer back (no frame leaked by
#   a connection), and no warning or error is printed.
# Every check prints PASS/FAIL with expected and actual values; a summary of
# each run and the total count close the output.
# TCP_SEM_RUNS limits the runs (e.g. "kernel libvma"); TCP_SEM_ONLY runs one
# section of the program (connect accept data sockopts shutdown resets
# fullpipe keepalive sendfile splice routemss signals timestamping); TCP_SEM_PRELOAD (e.g. the ASan runtime) is put
# before the library in LD_PRELOAD.
# run.sh-timeout: 480 (seven runs of the program, about 3 to 5 minutes on 2 loaded cores)
# run.sh-retry: 1 (times compared with the kernel's on a shared host)
set -u
ARG=${1:-$(dirname "$0")/../..}
HERE=$(cd "$(dirname "$0")" && pwd)
if [ -d "$ARG" ]; then BUILD=$ARG; LIB=$ARG/src/vma/.libs/libvma.so; else LIB=$ARG; BUILD=$(dirname "$LIB")/../../..; fi
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
command -v nft >/dev/null || { echo "SKIP: needs nft (silent peer)"; exit 77; }
LIB=$(readlink -f "$LIB")
PROG=$BUILD/tests/integration/tcp_semantics
if [ ! -x "$PROG" ]; then   # not built by `make check` yet: build it here
	PROG=$(mktemp /tmp/tcp_semantics.XXXXXX)
	cc -std=gnu11 -O2 -o "$PROG" "$HERE/tcp_semantics.c" -lpthread || { echo "SKIP: cannot build the helper"; exit 77; }
fi
export TB_PREFIX=${TCP_SEM_TB_PREFIX:-tsem}
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
TMP=$(mktemp -d)
chmod 755 "$TMP"
peer=
cleanup() {
	[ -n "$peer" ] && kill "$peer" 2>/dev/null
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	rm -rf "$TMP"
	case $PROG in /tmp/tcp_semantics.*) rm -f "$PROG" ;; esac
}
trap cleanup EXIT
trap 'exit 143' TERM INT
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
# The peer namespace drops SYNs to 9501: a connect there times out.
$A nft -f - <<-EOF || { echo "SKIP: nft rule in the peer namespace"; exit 77; }
	table inet tsemsyn {
		chain in {
			type filter hook input priority 0; policy accept;
			tcp dport 9501 tcp flags & (syn | ack) == syn drop
		}
	}
EOF
VMA="env LD_PRELOAD=${TCP_SEM_PRELOAD:+$TCP_SEM_PRELOAD:}$LIB VMA_TRACELEVEL=2"   # ld.so takes ":"
RUNS=${TCP_SEM_RUNS:-kernel libvma vmapeer both spin avoid route exit}
fail=0 total=0 failed=0
tcp_in_segs() { $1 awk '/^Tcp:/{n++; if(n==2) print $11}' /proc/net/snmp; }

run() {  # $1 label, $2 peer prefix, $3 test prefix [, $4 section]
	local a0 b0 a1 b1
	a0=$(tcp_in_segs "$A"); b0=$(tcp_in_segs "$B")
	$A $2 timeout 100 "$PROG" peer >"$TMP/peer.log" 2>&1 &
	peer=$!
	for _ in $(seq 50); do grep -q "peer ready" "$TMP/peer.log" && break; sleep 0.1; done
	$B $3 timeout 90 "$PROG" test 198.18.0.1 198.18.0.2 ${4:-${TCP_SEM_ONLY:-}} >"$TMP/test.log" 2>&1
	local rc=$?
	sleep 0.2
	kill "$peer" 2>/dev/null; wait "$peer" 2>/dev/null; peer=
	a1=$(tcp_in_segs "$A"); b1=$(tcp_in_segs "$B")
	echo "  [$1] kernel TcpInSegs: peer namespace +$((a1 - a0)), test namespace +$((b1 - b0))"
	# Proof of offload: a libvma side leaves its namespace's kernel TCP almost idle.
	offloaded "$1: test side offloaded" "$3" $((b1 - b0))
	offloaded "$1: peer side offloaded" "$2" $((a1 - a0))
	local n f
	n=$(grep -cE '^(PASS|FAIL):' "$TMP/test.log")
	f=$(grep -c '^FAIL:' "$TMP/test.log")
	total=$((total + n)); failed=$((failed + f))
	grep -E "^(FAIL|INFO):" "$TMP/test.log" | sed "s/^/  [$1] /"
	grep -h -A14 -E "VMA ERROR|AddressSanitizer|runtime error" "$TMP/test.log" "$TMP/peer.log" | head -20 |
		sed "s/^/  [$1] /"
	if [ $rc = 0 ] && ! grep -qE "AddressSanitizer|runtime error" "$TMP/test.log" "$TMP/peer.log"; then
		echo "PASS: $1: $n checks pass"
	else
		echo "FAIL: $1: $f of $n checks fail (exit $rc: $(tail -1 "$TMP/test.log"))"
		fail=1
	fi
	[ -n "${TCP_SEM_KEEP:-}" ] && cp "$TMP/test.log" "$TCP_SEM_KEEP.$1.test" && cp "$TMP/peer.log" "$TCP_SEM_KEEP.$1.peer"
}
offloaded() {  # $1 label, $2 prefix of that side, $3 its kernel TcpInSegs delta
	[ -n "$2" ] || return 0
	total=$((total + 1))
	if [ "$3" -lt "$OFFLOAD_MAX_SEGS" ]; then
		echo "PASS: $1 (kernel TcpInSegs +$3 < $OFFLOAD_MAX_SEGS)"
	else
		echo "FAIL: $1: expected kernel TcpInSegs +<$OFFLOAD_MAX_SEGS, got +$3 (the connections went through the kernel)"
		failed=$((failed + 1)); fail=1
	fi
}
clean_exit() {
	run "libvma test exits cleanly, kernel peer" "" "$VMA VMA_TRACELEVEL=DEBUG" data
	local closed held noise
	closed=$(grep -c "closed, every buffer back" "$TMP/test.log")
	held=$(grep -c "buffers are still held" "$TMP/test.log")
	noise=$(grep -v "^Pid: [0-9]* Tid: [0-9]* VMA WARNING: [*]" "$TMP/test.log" | grep -cE "VMA (WARNING|ERROR|PANIC)")
	total=$((total + 1))
	if [ "$closed" -ge 1 ] && [ "$held" = 0 ] && [ "$noise" = 0 ]; then
		echo "PASS: exit of an offloaded TCP client and server: $closed ring(s) closed with every buffer back, no warning"
	else
		echo "FAIL: exit: expected every ring closed with every buffer back and no warning; got $closed clean close(s), $held with buffers held, $noise warning/error line(s)"
		grep -E "still held|VMA (WARNING|ERROR)" "$TMP/test.log" | grep -v "WARNING: [*]" | head -5 | sed 's/^/  /'
		failed=$((failed + 1)); fail=1
	fi
}
# A kernel run moves ~1100 (test) and ~2400 (peer) segments through the namespaces.
OFFLOAD_MAX_SEGS=200
for r in $RUNS; do
	case $r in
	kernel) run "kernel reference" "" "" ;;
	libvma) run "libvma test, kernel peer" "" "$VMA" ;;
	vmapeer) run "kernel test, libvma peer" "$VMA" "" ;;
	both) run "libvma test, libvma peer" "$VMA" "$VMA" ;;
	spin) [ -z "${TCP_SEM_ONLY:-}" ] || [ "$TCP_SEM_ONLY" = signals ] &&
		run "libvma test busy-polling, kernel peer" "" "$VMA VMA_RX_POLL=-1 VMA_SELECT_POLL=-1" signals ;;
	avoid) [ -z "${TCP_SEM_ONLY:-}" ] &&
		run "libvma test avoiding sys-calls, kernel peer" "" "$VMA VMA_AVOID_SYS_CALLS_ON_TCP_FD=1" \
			accept,data,sockopts,keepalive ;;
	route) if [ -z "${TCP_SEM_ONLY:-}" ] || [ "$TCP_SEM_ONLY" = routemss ]; then
		$B ip route replace 198.18.0.0/24 dev "$TB_PREFIX-b0" mtu 1400 advmss 1300
		export TCP_SEM_ROUTE=1
		run "kernel reference, route mtu 1400 advmss 1300" "" "" routemss
		run "libvma test, route mtu 1400 advmss 1300" "" "$VMA" routemss
		unset TCP_SEM_ROUTE
		$B ip route replace 198.18.0.0/24 dev "$TB_PREFIX-b0" proto kernel scope link src 198.18.0.2
	fi ;;
	exit) [ -z "${TCP_SEM_ONLY:-}" ] || [ "$TCP_SEM_ONLY" = data ] && clean_exit ;;
	esac
done
echo "tcp_semantics: $total checks, $failed failed"
exit $fail

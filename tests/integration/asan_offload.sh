#!/bin/bash
# The offload path under AddressSanitizer + UndefinedBehaviorSanitizer with
# real traffic (root; not part of the default run: run.sh skips it unless the
# build dir it gets is a sanitizer build).
# Usage: asan_offload.sh [SAN_BUILD_DIR]   exit 0 pass, 1 fail, 77 skip.
# SAN_BUILD_DIR (default /tmp/build-asan) is configured with
# --enable-sanitizers and built with `make check`. The sanitizer runtimes are
# preloaded before libvma.so (an uninstrumented app needs them first), every
# report goes to a log file, and any AddressSanitizer, LeakSanitizer or UBSan
# report fails the run. Runs, against that build:
#   udp_semantics, iomux_udp, life_udp, udp_tx_flush, udp_migrate, udp_readers, and the
#   Extra API's extra_api, extra_xtreme and extra_examples (C programs under
#   libvma),
#   ring_flows, ring_steering (ring_echo from the sanitizer build),
#   mp_procs scenarios d g i l m n o (threaded servers: lanes, TCP connections
#   moving between them at accept and after their reader, a UDP socket
#   moving),
#   sockperf server + client under libvma: ping-pong and throughput, 3 s each.
# Leaks allocated by python3 itself (peers in some scripts) are suppressed;
# nothing with a libvma frame is.
set -u
SAN=$(readlink -f "${1:-/tmp/build-asan}")
HERE=$(cd "$(dirname "$0")" && pwd)
LIB=$SAN/src/vma/.libs/libvma.so
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] || { echo "SKIP: no $LIB"; exit 77; }
readelf -d "$LIB" 2>/dev/null | grep -q 'NEEDED.*libasan' ||
	{ echo "SKIP: $LIB is not a sanitizer build (configure --enable-sanitizers)"; exit 77; }
make -C "$SAN" -s check TESTS= >/dev/null 2>&1 ||
	{ echo "FAIL: building the test programs in $SAN"; exit 1; }

ASAN_RT=$(gcc -print-file-name=libasan.so)
UBSAN_RT=$(gcc -print-file-name=libubsan.so)
LOGS=$(mktemp -d /tmp/vma-asan.XXXXXX)
chmod 1777 "$LOGS"   # unprivileged runs write their reports here too
TESTBED_UP=
# KEEP_LOGS=1 keeps the reports and outputs (their directory is printed).
cleanup() {
	[ -n "$TESTBED_UP" ] && bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	if [ -n "${KEEP_LOGS:-}" ]; then echo "logs kept in $LOGS"; else rm -rf "$LOGS"; fi
}
trap cleanup EXIT
cat >"$LOGS/lsan.supp" <<'EOF'
# Allocations of the uninstrumented programs the scripts start under the
# preload (python3 peers, bash and coreutils in helper shells), alive at exit.
leak:python3
leak:/usr/bin/bash
leak:/usr/bin/tr
EOF
export VMA_TEST_PRELOAD="$ASAN_RT:$UBSAN_RT" UDP_SEM_PRELOAD="$ASAN_RT:$UBSAN_RT"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:log_path=$LOGS/asan"
export LSAN_OPTIONS="suppressions=$LOGS/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$LOGS/ubsan"

fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

# mp_procs: threads on one listener (connections moving at accept), an
# acceptor handing connections to workers (moving to their reader), a
# lane per thread with SO_REUSEPORT, a UDP socket moving between readers.
for t in udp_semantics iomux_udp life_udp udp_tx_flush udp_migrate udp_readers ring_flows ring_steering mp_procs \
	extra_api extra_xtreme extra_examples; do
	start=$(date +%s)
	[ $t = mp_procs ] && export MP_SCENARIOS="d g i l m n o"
	timeout -k 5 300 bash "$HERE/$t.sh" "$SAN" >"$LOGS/$t.out" 2>&1
	unset MP_SCENARIOS
	rc=$?
	[ $rc = 0 ] || sed 's/^/    /' "$LOGS/$t.out" | grep -vE '^    PASS' | tail -30
	check $rc "$t under sanitizers (exit $rc, $(($(date +%s) - start))s)"
done

# sockperf (C++) under libvma on both ends.
export TB_PREFIX=vmaasan
if ! command -v sockperf >/dev/null; then
	echo "FAIL: sockperf not installed"; fail=1
elif ! bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null; then
	echo "FAIL: testbed"; fail=1
else
	TESTBED_UP=1
	VMA="env LD_PRELOAD=$ASAN_RT:$UBSAN_RT:$LIB VMA_TRACELEVEL=2"
	for mode in pp tp; do
		port=$((11000 + RANDOM % 1000))
		nsenter --net=/run/netns/vmaasan-b $VMA sockperf sr -i 198.18.0.2 -p $port \
			>"$LOGS/sr.$mode" 2>&1 &
		server=$!
		sleep 2
		nsenter --net=/run/netns/vmaasan-a $VMA timeout 30 sockperf $mode -i 198.18.0.2 -p $port -t 3 \
			>"$LOGS/cl.$mode" 2>&1
		rc=$?
		kill -INT $server 2>/dev/null
		for _ in $(seq 50); do kill -0 $server 2>/dev/null || break; sleep 0.2; done
		kill -KILL $server 2>/dev/null
		wait $server
		src=$?
		if [ $mode = pp ]; then want='avg-latency='; else want='Summary: Message Rate is'; fi
		grep -q "$want" "$LOGS/cl.$mode"
		ok=$?
		grep -E "$want" "$LOGS/cl.$mode" | head -1 | sed 's/^/    /'
		[ $ok = 0 ] && [ $rc = 0 ] && [ $src = 0 ]
		check $? "sockperf $mode, 3 s, both ends under libvma (client exit $rc, server exit $src)"
	done
fi

# Every sanitizer report, whichever process wrote it.
reports=$(grep -lE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error' "$LOGS"/asan.* "$LOGS"/ubsan.* 2>/dev/null)
for r in $reports; do
	echo "---- $(basename "$r")"
	head -60 "$r"
done
n=$(printf '%s' "$reports" | grep -c .)
check "$n" "no sanitizer reports ($n)"
exit $fail

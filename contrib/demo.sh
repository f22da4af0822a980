#!/bin/bash
# Kernel sockets against libvma in one command: installs what is missing,
# builds libvma in build/, and runs the side-by-side benchmark
# (tests/bench/vma_bench.sh --quick) on two network namespaces joined by a
# veth pair: sockperf UDP ping-pong and throughput, 64 B, on kernel sockets
# (blocking and busy-polling), with libvma on the server only and on both
# ends, next to the bare AF_XDP echo floor. It prints the tables, says from
# the server kernel's UDP counters whether the traffic really bypassed the
# kernel, and removes the namespaces again, whatever happens.
#
#   sudo ./contrib/demo.sh           (root: namespaces, XDP, packages)
#   sudo ./contrib/demo.sh --full    every workload of the benchmark (~2 min)
# Environment: BENCH_SECONDS (2 a run), JOBS (make -j, 2), TB_PREFIX.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
mode=--quick
[ "${1:-}" = --full ] && mode=

die() { echo "demo: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (network namespaces, XDP, packages): sudo $0"

"$top/contrib/deps.sh" install || die "could not install the packages of contrib/deps.sh"

log="$top/build/demo-build.log"
mkdir -p "$top/build" || die "cannot create build/"
echo "demo: building libvma in build/ (log: build/demo-build.log)"
(
	{ [ -x "$top/configure" ] || ./autogen.sh; } &&
		cd build && { [ -f Makefile ] || ../configure; } &&
		make -j"${JOBS:-2}"
) >"$log" 2>&1 || { tail -30 "$log"; die "build failed"; }

# The benchmark sets the testbed up and tears it down itself (trap); this
# one covers an interrupt between the two.
trap 'TB_PREFIX=${TB_PREFIX:-vmatb} "$top/contrib/testbed.sh" down >/dev/null 2>&1' EXIT
trap 'exit 130' INT TERM
echo "demo: kernel vs libvma, $([ -n "$mode" ] && echo "quick mode, ${BENCH_SECONDS:-2} s a run" || echo "full mode")"
BENCH_SECONDS=${BENCH_SECONDS:-} "$top/tests/bench/vma_bench.sh" $mode "$top/build"
rc=$?
[ $rc -le 1 ] || die "the benchmark could not run (exit $rc)"
echo
echo "demo: rows: kernel = plain sockets, kernel-bp = busy-polling sockets, libvma-server = LD_PRELOAD on"
echo "demo: the server only, libvma-both = on both ends, ring_echo = bare AF_XDP echo (the floor)."
echo "demo: the full benchmark: sudo tests/bench/vma_bench.sh build   (docs/benchmarks.md)"

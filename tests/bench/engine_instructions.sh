#!/bin/bash
# Instructions the TCP engine spends per round trip of a 64-byte ping-pong
# and per bulk segment, counted by callgrind (exact, unlike timings on a
# shared virtual machine), for one or more trees built in TREE/build.
#
#   tests/bench/engine_instructions.sh TREE [TREE ...]
#
# The same tcp_engine_bench.c (this tree's) is compiled against each tree's
# libvma_core.a, so the harness costs the same everywhere. Ping-pong runs
# for 1 and 3 s; the difference of the two counts over the difference of
# their round trips leaves out start-up and exit. Bulk gives the count per
# 1447-byte segment over a 2-s run (start-up included, a few percent).
# Prints one line per tree, then each tree's ratio to the first.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
src=$here/tcp_engine_bench.c
command -v valgrind >/dev/null || { echo "engine_instructions: valgrind is needed (apt-get install valgrind)" >&2; exit 2; }
[ $# -ge 1 ] || { echo "usage: $0 TREE [TREE ...]" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run BIN ARGS: "count units" of one callgrind run (units: round trips or segments)
run() {
	local bin=$1; shift
	local out
	out=$(valgrind --tool=callgrind --callgrind-out-file="$work/cg" "$bin" "$@" 2>&1)
	local ir units
	ir=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' <<<"$out")
	units=$(sed -n -e 's/^pp: \([0-9]*\) round trips.*/\1/p' -e 's/^bulk: .* \([0-9]*\) segments.*/\1/p' <<<"$out")
	echo "$ir $units"
}

first_pp=""
first_bulk=""
i=0
for tree in "$@"; do
	tree=$(cd "$tree" && pwd)
	lib=$tree/build/src/vma/.libs/libvma_core.a
	[ -f "$lib" ] || { echo "engine_instructions: $lib missing (configure and make $tree/build)" >&2; exit 2; }
	bin=$work/teb$i
	# the bench uses the engine only: no libbpf, libxdp or verbs object is linked in
	gcc -std=gnu11 -O2 -g -D_GNU_SOURCE -I"$tree/build" -I"$tree/src/vma" -I"$tree/include" -include config.h \
	    -o "$bin" "$src" "$lib" -lpthread -ldl
	read -r ir1 rt1 < <(run "$bin" pp 1)
	read -r ir3 rt3 < <(run "$bin" pp 3)
	read -r irb segs < <(run "$bin" bulk 2)
	pp=$(awk -v a="$ir1" -v b="$ir3" -v x="$rt1" -v y="$rt3" 'BEGIN { printf "%.0f", (b - a) / (y - x) }')
	bulk=$(awk -v a="$irb" -v s="$segs" 'BEGIN { printf "%.0f", a / s }')
	rev=$(git -C "$tree" describe --always --dirty 2>/dev/null || echo "?")
	echo "tree $tree ($rev): ping-pong $pp instructions per round trip, bulk $bulk per segment"
	echo "METRIC pp_instructions_per_round_trip $pp"
	echo "METRIC bulk_instructions_per_segment $bulk"
	if [ -z "$first_pp" ]; then
		first_pp=$pp
		first_bulk=$bulk
	else
		awk -v p="$pp" -v fp="$first_pp" -v b="$bulk" -v fb="$first_bulk" \
		    'BEGIN { printf "  against the first tree: ping-pong %.3fx, bulk %.3fx\n", p / fp, b / fb }'
	fi
	i=$((i + 1))
done

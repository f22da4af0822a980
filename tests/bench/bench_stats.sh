# Sourced by the multi-process benchmarks (mp_bench.sh, mp_ab.sh): how a
# cell's rounds become one number.

# median N...: the middle value (the lower middle of an even count); words
# that are not rates (a run that gave none) are left out; n/a when none is.
median() {
	printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "n/a" }'
}

# ratio_of A B: A / B with two decimals, n/a without both.
ratio_of() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "n/a" }'
}

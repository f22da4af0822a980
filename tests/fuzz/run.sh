#!/bin/bash
# Builds the libFuzzer harnesses of tests/fuzz/ and runs each for a while.
#
#   tests/fuzz/run.sh [SECONDS] [HARNESS...]
#
# SECONDS per harness (default 10); HARNESS names (fuzz_stack_rx ...) pick
# some, default all. Everything is built with clang straight from the
# sources (no automake, no configure: an empty config.h is made for the one
# source that includes it), with -fsanitize=fuzzer,address,undefined and
# UBSan fatal. Each harness starts from its committed corpus,
# tests/fuzz/corpus/<harness>/ (seeds and regress-* inputs of past
# findings, all run first), and writes what it finds new to
# build-fuzz/corpus/<harness>/, never into the committed tree.
#
# Prints one line per harness: executions, exec/s, coverage (libFuzzer's
# cov: edges and ft: features at the end). Exits 1 if any harness crashed,
# leaked, hit a UBSan report, a timeout or an out-of-memory; the input is
# kept in build-fuzz/artifacts/ and the log in build-fuzz/logs/.
# Exits 2 when clang or libFuzzer is missing (run_tests.sh reports a SKIP).
#
# Environment: FUZZ_JOBS harnesses built and run at once (default 2),
# FUZZ_OUT (default build-fuzz/ at the top of the tree), CC (default clang).
set -u

top=$(cd "$(dirname "$0")/../.." && pwd)
fuzz="$top/tests/fuzz"
secs=${1:-10}
shift 2>/dev/null || true
case $secs in
'' | *[!0-9]*) echo "usage: $0 [SECONDS] [HARNESS...]" >&2; exit 2 ;;
esac
jobs=${FUZZ_JOBS:-2}
out=${FUZZ_OUT:-$top/build-fuzz}
cc=${CC:-clang}
case $cc in gcc* | cc) cc=clang ;; esac   # libFuzzer is clang's

all=(fuzz_stack_rx fuzz_tcp_opts fuzz_ip4_reass fuzz_cfg_rules fuzz_cfg_params fuzz_stats_reader)
if [ $# -gt 0 ]; then
	harnesses=("$@")
else
	harnesses=("${all[@]}")
fi

# Project sources each harness needs besides its own file and fuzz_log.c.
# vlog.c reaches libc through the os/ module, so every list ends with it.
# The whole stack module, by glob: a list written by hand went stale when the
# engine gained files (tcp_rack.c, tcp_state.c, ...) and the build broke.
STACK_SRC="$(cd "$top" && echo src/vma/stack/*.c) src/vma/ring/ring_buf.c src/vma/log/vlog.c src/vma/os/os_libc.c"
sources_of() {
	case $1 in
	fuzz_stack_rx | fuzz_tcp_opts | fuzz_ip4_reass) echo "$STACK_SRC" ;;
	fuzz_cfg_rules) echo "src/vma/config/cfg_rules.c src/vma/log/vlog.c src/vma/os/os_libc.c" ;;
	fuzz_cfg_params) echo "src/vma/config/cfg_params.c src/vma/config/cfg_spec.c src/vma/log/vlog.c src/vma/os/os_libc.c" ;;
	fuzz_stats_reader)
		echo "tools/vma_stats/stats_reader.c tools/vma_stats/stats_view.c
			src/vma/stats/stats_format.c src/vma/log/vlog.c src/vma/os/os_libc.c" ;;
	*) return 1 ;;
	esac
}
max_len_of() {
	case $1 in
	fuzz_tcp_opts) echo 64 ;;
	fuzz_cfg_params) echo 2048 ;;
	fuzz_stats_reader) echo 65536 ;;
	*) echo 8192 ;;
	esac
}

for h in "${harnesses[@]}"; do
	sources_of "$h" >/dev/null || { echo "unknown harness $h (known: ${all[*]})" >&2; exit 2; }
done

# clang with libFuzzer (Debian: clang + libclang-rt-14-dev).
if ! command -v "$cc" >/dev/null 2>&1; then
	echo "SKIP: $cc not found (contrib/deps.sh install adds clang and libclang-rt-14-dev)"
	exit 2
fi
mkdir -p "$out"/{obj,bin,logs,artifacts,gen,corpus}
probe="$out/gen/probe.c"
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' >"$probe"
if ! "$cc" -fsanitize=fuzzer,address,undefined -o "$out/gen/probe" "$probe" >"$out/logs/probe.log" 2>&1; then
	echo "SKIP: $cc cannot link -fsanitize=fuzzer,address,undefined (libFuzzer missing:" \
		"install libclang-rt-14-dev); see $out/logs/probe.log"
	exit 2
fi

: >"$out/gen/config.h"    # ring_buf.c includes it and needs nothing from it
CFLAGS=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g -O1
	-std=gnu11 -D_GNU_SOURCE -DVMA_SYSCONFDIR=\"/etc\" -DVMA_SBINDIR=\"/usr/sbin\"
	-Wall -Wno-unused-parameter
	-I"$out/gen" -I"$top/src/vma" -I"$top/include" -I"$top/tools/vma_stats")
LDFLAGS=(-fsanitize=fuzzer,address,undefined -Wl,--wrap=vlog_print -lpthread)

# Objects: each source once (the same flags for every harness).
obj_of() { local s=${1//\//_}; echo "$out/obj/${s%.c}.o"; }
declare -A want=()
for h in "${harnesses[@]}"; do
	for s in $(sources_of "$h") tests/fuzz/fuzz_log.c "tests/fuzz/$h.c"; do
		want[$s]=1
	done
done
echo "== fuzz: building ${#harnesses[@]} harness(es) with $cc in ${out#"$top"/}/"
build_fail=0
export -f obj_of
export top out cc
printf '%s\n' "${!want[@]}" |
	CFLAGS_STR="${CFLAGS[*]}" xargs -P "$jobs" -I{} bash -c '
		read -r -a CFLAGS <<<"$CFLAGS_STR"; s={}; o=$(obj_of "$s")
		"$cc" "${CFLAGS[@]}" -c "$top/$s" -o "$o" 2>"$o.log" ||
			{ echo "!! compile $s:"; cat "$o.log"; exit 1; }' ||
	build_fail=1
if [ $build_fail = 0 ]; then
	for h in "${harnesses[@]}"; do
		objs=()
		for s in $(sources_of "$h") tests/fuzz/fuzz_log.c "tests/fuzz/$h.c"; do
			objs+=("$(obj_of "$s")")
		done
		"$cc" "${objs[@]}" "${LDFLAGS[@]}" -o "$out/bin/$h" 2>"$out/logs/$h-link.log" ||
			{ echo "!! link $h:"; cat "$out/logs/$h-link.log"; build_fail=1; }
	done
fi
[ $build_fail = 0 ] || { echo "fuzz: build failed"; exit 1; }

# Dictionaries: the parameter names from the table; the libvma.conf words.
grep -oE '^CFG_[A-Z_]+\(VMA_[A-Z0-9_]+' "$top/src/vma/config/cfg_params.def" |
	sed 's/.*\(VMA_[A-Z0-9_]*\)$/"\1="/' | sort -u >"$out/gen/fuzz_cfg_params.dict"
dict_of() {
	case $1 in
	fuzz_cfg_params) echo "$out/gen/fuzz_cfg_params.dict" ;;
	fuzz_cfg_rules) echo "$fuzz/cfg_rules.dict" ;;
	esac
}

# run_one HARNESS: the fuzzer for $secs seconds; the status in logs/HARNESS.rc.
run_one() {
	local h=$1 d args=()
	mkdir -p "$out/corpus/$h"
	d=$(dict_of "$h")
	[ -n "$d" ] && [ -s "$d" ] && args+=(-dict="$d")
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
		UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		"$out/bin/$h" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
		-rss_limit_mb=2048 -max_len="$(max_len_of "$h")" "${args[@]}" \
		-artifact_prefix="$out/artifacts/$h-" "$out/corpus/$h" "$fuzz/corpus/$h" \
		>"$out/logs/$h.log" 2>&1
	echo $? >"$out/logs/$h.rc"
}

echo "== fuzz: running each harness ${secs}s ($jobs at once)"
running=0
for h in "${harnesses[@]}"; do
	run_one "$h" &
	running=$((running + 1))
	if [ $running -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
done
wait

failed=0
for h in "${harnesses[@]}"; do
	log="$out/logs/$h.log"
	rc=$(cat "$out/logs/$h.rc" 2>/dev/null || echo 99)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+.*cov: [0-9]+' "$log" | tail -1)
	cov=$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	if [ "$rc" = 0 ]; then
		status=ok
	else
		status="FAILED (exit $rc)"
		failed=1
	fi
	printf '   %-18s %-16s execs %-9s exec/s %-7s cov %-6s ft %s\n' "$h" "$status" \
		"${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}"
	if [ "$rc" != 0 ]; then
		grep -E 'ERROR: |runtime error|^fuzz: |SUMMARY|Test unit written|==[0-9]+== ?(ERROR|WARNING)' "$log" |
			head -n 12 | sed 's/^/      | /'
		echo "      | full log: ${log#"$top"/}"
	fi
done
[ $failed = 0 ] && echo "fuzz: all ${#harnesses[@]} harness(es) ran clean" ||
	echo "fuzz: findings above; reproduce with build-fuzz/bin/HARNESS ARTIFACT"
exit $failed

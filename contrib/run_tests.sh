#!/bin/bash
# The project's test command (README "Quick start"), run from the top of a
# clone, as root on Debian 12 with the packages of contrib/deps.sh:
#
#   1. ./autogen.sh
#   2. build/      configure --enable-werror, make -j2, make check (unit tests)
#   2b. make distcheck: the release tarball (exactly the files git tracks
#                  plus autotools' output) configured, built and unit tested
#                  out of tree from a read-only copy, installed and
#                  uninstalled; as user nobody when run as root, so a build
#                  writing into its source fails (about two minutes)
#   2c. contrib/build_packages.sh --no-check: the Debian packages built from
#                  the tree (dpkg-buildpackage, lintian without errors),
#                  installed into a fresh Debian 12 root (mmdebstrap) and
#                  smoke tested from there: banner, man pages, pkg-config,
#                  vma_stats, a UDP and a TCP exchange offloaded on the
#                  testbed (about one minute; docs/packaging.md)
#   3. build-san/  configure --enable-sanitizers, make check under ASan+UBSan
#                  with leak detection
#   3b. tests/fuzz/run.sh 10: every libFuzzer harness built with clang and
#                  run 10 s (about a minute and a half in all); SKIP when
#                  clang or libFuzzer is missing
#   4. tests/integration/run.sh with build/src/vma/.libs/libvma.so, on
#      testbeds with veth TX checksum offload off and VMA_RX_SW_CSUM=1
#   5. the same on veths left at their defaults (TB_VETH_OFFLOADS=default,
#      the set-up of containers), VMA_RX_SW_CSUM at its default
#   6. the verbs backend on softverbs (docs/verbs.md): tests/integration/run.sh
#      again with VMA_RING_BACKEND=verbs and build/tests/softverbs/lib on
#      LD_LIBRARY_PATH, for the UDP and TCP tests of VERBS_PASS_TESTS (an
#      extended regex of test names; about 11 minutes); SKIP when configure
#      found no rdma-core
#   7. tests/integration/asan_offload.sh build-san: the offload path of the
#      sanitizer build of step 3 under real traffic (UDP, the Extra API,
#      threaded servers, sockperf), any ASan, LeakSanitizer or UBSan report
#      failing it (about three and a half minutes); SKIP without step 3
#
# Ends with one line "N passed, N failed" summing unit and integration
# results, and exits 1 if anything failed. Missing packages are installed
# first (contrib/deps.sh install) when running as root, so the command works
# on a fresh Debian 12 machine; NO_INSTALL=1 only lists them.
# Environment: JOBS (default 2), SKIP_DISTCHECK=1 to leave out step 2b,
# SKIP_PACKAGES=1 to leave out step 2c,
# SKIP_SAN=1 to leave out step 3,
# SKIP_FUZZ=1 to leave out step 3b (FUZZ_SECONDS per harness, default 10),
# SKIP_OFFLOAD_PASS=1 to leave out step 5, SKIP_VERBS_PASS=1 to leave out
# step 6, SKIP_SAN_OFFLOAD=1 to leave out step 7.
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
jobs=${JOBS:-2}
logs="$top/build-logs"
mkdir -p "$logs"

total_pass=0 total_fail=0 total_skip=0
summary=()

note() { printf '== %s\n' "$*"; }

# record PHASE PASSED FAILED [SKIPPED [WHICH]]: WHICH names what failed,
# so the summary (the part of a long CI log that is surely read) says it.
record() {
	total_pass=$((total_pass + $2))
	total_fail=$((total_fail + $3))
	total_skip=$((total_skip + ${4:-0}))
	summary+=("$(printf '%-28s %4d passed, %d failed%s%s' "$1" "$2" "$3" \
		"$([ "${4:-0}" -gt 0 ] && echo ", $4 skipped")" \
		"$([ -n "${5:-}" ] && echo " ($5)")")")
}

# run_logged NAME CMD...: run CMD with output in build-logs/NAME.log; on
# failure show the end of the log.
run_logged() {
	local name=$1
	shift
	local rc
	"$@" >"$logs/$name.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] && return 0
	echo "!! $name failed (exit $rc); last lines of build-logs/$name.log:"
	tail -n 40 "$logs/$name.log" | sed 's/^/   | /'
	return $rc
}

# unit_results BUILDDIR PHASE: count Check's test cases from each unit
# test's log ("NN%: Checks: N, Failures: F, Errors: E"); a program that
# died before printing that counts as one failure.
unit_results() {
	local dir=$1 phase=$2 pass=0 fail=0 skip=0 trs logf line n f e res which=
	for trs in "$dir"/tests/unit/*.trs; do
		[ -e "$trs" ] || continue
		logf=${trs%.trs}.log
		res=$(sed -n 's/^:test-result: //p' "$trs" | head -1)
		line=$(grep -Eo 'Checks: [0-9]+, Failures: [0-9]+, Errors: [0-9]+' "$logf" 2>/dev/null | tail -1)
		if [ -n "$line" ]; then
			read -r n f e < <(sed -E 's/Checks: ([0-9]+), Failures: ([0-9]+), Errors: ([0-9]+)/\1 \2 \3/' <<<"$line")
			pass=$((pass + n - f - e))
			fail=$((fail + f + e))
			# A sanitizer report after the last case fails the program.
			[ "$res" = PASS ] || [ $((f + e)) -gt 0 ] || fail=$((fail + 1))
		else
			case $res in
			PASS | XFAIL) pass=$((pass + 1)) ;;
			SKIP) skip=$((skip + 1)) ;;
			*) fail=$((fail + 1)) ;;
			esac
		fi
		[ "$res" = PASS ] || [ "$res" = SKIP ] || {
			which="${which:+$which }$(basename "${trs%.trs}")"
			echo "!! $phase: ${trs#"$top"/} $res; its log:"
			sed 's/^/   | /' "$logf" | tail -n 60
		}
	done
	if [ $((pass + fail + skip)) -eq 0 ]; then
		echo "!! $phase: no unit test results found"
		fail=1
	fi
	record "$phase" "$pass" "$fail" "$skip" "$which"
}

# build_and_check DIR PHASE CONFIGURE-ARGS...
build_and_check() {
	local dir=$1 phase=$2
	shift 2
	mkdir -p "$top/$dir"
	note "$phase: configure $* in $dir/"
	if ! (cd "$top/$dir" && run_logged "$dir-configure" ../configure "$@"); then
		record "$phase (configure)" 0 1
		return 1
	fi
	sed -n '/^configure: *$/,$p' "$logs/$dir-configure.log" | sed 1d
	note "$phase: make -j$jobs"
	if ! (cd "$top/$dir" && run_logged "$dir-make" make -j"$jobs"); then
		record "$phase (make)" 0 1
		return 1
	fi
	note "$phase: make check"
	(cd "$top/$dir" && run_logged "$dir-check" make -j"$jobs" check)
	grep -E '^(PASS|FAIL|ERROR|SKIP|XFAIL|XPASS): ' "$logs/$dir-check.log" | sed 's/^/   /'
	unit_results "$top/$dir" "$phase"
}

# fuzz_step: tests/fuzz/run.sh, one passed or failed case per harness;
# a missing clang/libFuzzer is a SKIP, not a failure.
fuzz_step() {
	local secs=${FUZZ_SECONDS:-10} rc pass fail
	if [ "${SKIP_FUZZ:-0}" = 1 ]; then
		note "fuzz: SKIP (SKIP_FUZZ=1)"
		record "fuzz (skipped)" 0 0 1
		return
	fi
	note "fuzz: tests/fuzz/run.sh $secs"
	FUZZ_JOBS=$jobs "$top/tests/fuzz/run.sh" "$secs" >"$logs/fuzz.log" 2>&1
	rc=$?
	if [ $rc -eq 2 ] && grep -q '^SKIP' "$logs/fuzz.log"; then
		grep '^SKIP' "$logs/fuzz.log" | sed 's/^/   /'
		record "fuzz (no clang/libFuzzer)" 0 0 1
		return
	fi
	grep -E '^   fuzz_|^      \||^!!|^fuzz:' "$logs/fuzz.log"
	pass=$(grep -cE '^   fuzz_[a-z0-9_]+ +ok ' "$logs/fuzz.log")
	fail=$(grep -cE '^   fuzz_[a-z0-9_]+ +FAILED' "$logs/fuzz.log")
	[ $rc -eq 0 ] || [ "$fail" -gt 0 ] || {
		fail=1
		tail -n 30 "$logs/fuzz.log" | sed 's/^/   | /'
	}
	record "fuzz (${secs}s per harness)" "$pass" "$fail"
}

# distcheck_step: make distcheck, one passed or failed case (the tarball's
# unit tests are those of step 2 again, not counted twice). distcheck makes
# the unpacked source read-only to catch a build that writes into it, which
# root does not notice: as root, build/ only makes the tarball (make dist,
# which also compares it with git) and user nobody runs distcheck from a
# copy of it.
distcheck_step() {
	local tmp version rc
	if [ "${SKIP_DISTCHECK:-0}" = 1 ]; then
		note "distcheck: SKIP (SKIP_DISTCHECK=1)"
		record "make distcheck (skipped)" 0 0 1
		return
	fi
	if ! [ -f "$top/build/Makefile" ]; then
		note "distcheck: SKIP (build/ is not configured)"
		record "make distcheck (no build/)" 0 0 1
		return
	fi
	if [ "$(id -u)" != 0 ] || ! id nobody >/dev/null 2>&1 || ! command -v runuser >/dev/null; then
		note "distcheck: make -j$jobs distcheck in build/"
		(cd "$top/build" && run_logged distcheck make -j"$jobs" distcheck)
		rc=$?
	else
		note "distcheck: make dist in build/, then make -j$jobs distcheck as nobody"
		tmp=$(mktemp -d /tmp/vma-distcheck.XXXXXX)
		version=$(sed -n 's/^VERSION = //p' "$top/build/Makefile")
		if (cd "$top/build" && run_logged dist make dist) &&
			tar xzf "$top/build/libvma-$version.tar.gz" -C "$tmp" && chown -R nobody "$tmp"; then
			(cd "$tmp/libvma-$version" && run_logged distcheck runuser -u nobody -- \
				sh -c "./configure && make -j$jobs distcheck")
			rc=$?
		else
			echo "!! distcheck: making or unpacking the tarball failed (build-logs/dist.log)"
			rc=1
		fi
		rm -rf "$tmp"
	fi
	if [ $rc -eq 0 ]; then
		printf '   tarball built, installed and unit tested out of tree: %s of %s passed\n' \
			"$(sed -n 's/^# PASS: *//p' "$logs/distcheck.log" | tail -1)" \
			"$(sed -n 's/^# TOTAL: *//p' "$logs/distcheck.log" | tail -1)"
		record "make distcheck" 1 0
	else
		record "make distcheck" 0 1
	fi
}

# packages_step: contrib/build_packages.sh, one case per check it prints
# (its unit tests are step 2's: --no-check). SKIP without its tools or root.
packages_step() {
	local rc pass fail
	if [ "${SKIP_PACKAGES:-0}" = 1 ]; then
		note "packages: SKIP (SKIP_PACKAGES=1)"
		record "packages (skipped)" 0 0 1
		return
	fi
	note "packages: contrib/build_packages.sh --no-check (build, lintian, fresh root, smoke test)"
	JOBS=$jobs "$top/contrib/build_packages.sh" --no-check >"$logs/packages.log" 2>&1
	rc=$?
	if [ $rc -eq 77 ]; then
		grep '^SKIP' "$logs/packages.log" | sed 's/^/   /'
		record "packages (skipped)" 0 0 1
		return
	fi
	grep -E '^(ok|FAIL|   [|OEW])|^packages:' "$logs/packages.log" | sed 's/^/   /'
	pass=$(grep -c '^ok: ' "$logs/packages.log")
	fail=$(grep -c '^FAIL: ' "$logs/packages.log")
	[ $rc -eq 0 ] || [ "$fail" -gt 0 ] || fail=1
	record "packages (build, install, smoke)" "$pass" "$fail"
}

# integration LABEL LOGNAME CMD...: tests/integration/run.sh under CMD
# (an env prefix), recorded as LABEL.
integration() {
	local label=$1 logname=$2 last
	shift 2
	note "$label"
	"$@" "$top/tests/integration/run.sh" "$lib" | tee "$logs/$logname.log"
	last=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$logs/$logname.log" | tail -1)
	if [ -n "$last" ]; then
		read -r it_pass _ it_fail _ it_skip _ <<<"$(tr -d ',' <<<"$last")"
		record "$label" "$it_pass" "$it_fail" "${it_skip:-0}" \
			"$(sed -n 's/^FAIL \([^ ]*\) .*/\1/p' "$logs/$logname.log" | tr '\n' ' ' | sed 's/ $//')"
	else
		record "$label (runner)" 0 1
	fi
}

# The tests step 6 runs on the verbs backend: UDP and TCP end to end against
# kernel peers and between libvma processes, the Extra API, the t_* library
# tests, hostile's floods. Left out: the tests of the xdp backend's own
# machinery (XDP program, vmad, shared UMEM, share groups across fork).
# tcp_semantics and tcp_wire run here too, each once more when it fails
# (run.sh's retry): a timing-sensitive check of tcp_semantics fails now and
# then on softverbs (docs/verbs.md, "Known weakness").
VERBS_PASS_TESTS=${VERBS_PASS_TESTS:-'^(udp_offload|udp_semantics|udp_tx_flush|iomux_udp|tcp_offload|tcp_stream|tcp_conns|tcp_exit_fin|tcp_semantics|tcp_wire|tcp_ctl_thread|tcp_apps|hostile|udp_migrate|close_race|ring_shutdown|ring_flows|avoid_sys_calls|exception_handling|extra_api|extra_examples|extra_xtreme|ring_logic|rx_drain_rate|secondary_addr|stats_monitor|stats_sockperf|net_netns|banner_config|bindings|dlopen|errno_equal|fork|iperf3|local_trust|mt_client|redis|tcp_echo_py|mp_procs|mp_queues|life_udp)$'}

# verbs_step: step 6, when softverbs was built (rdma-core found).
verbs_step() {
	local sv="$top/build/tests/softverbs/lib"
	if [ "${SKIP_VERBS_PASS:-0}" = 1 ]; then
		note "verbs backend pass: SKIP (SKIP_VERBS_PASS=1)"
		record "verbs backend (skipped)" 0 0 1
		return
	fi
	if ! [ -e "$sv/libibverbs.so.1" ]; then
		note "verbs backend pass: SKIP (softverbs not built: configure found no rdma-core)"
		record "verbs backend (no rdma-core)" 0 0 1
		return
	fi
	integration "integration tests (verbs backend, softverbs)" integration-verbs \
		env VMA_RING_BACKEND=verbs LD_LIBRARY_PATH="$sv" ONLY="$VERBS_PASS_TESTS"
}

# san_offload_step: step 7, when step 3 built build-san.
san_offload_step() {
	local pass fail
	if [ "${SKIP_SAN:-0}" = 1 ] || [ "${SKIP_SAN_OFFLOAD:-0}" = 1 ]; then
		note "offload under sanitizers: SKIP (SKIP_SAN or SKIP_SAN_OFFLOAD)"
		record "offload under sanitizers (skipped)" 0 0 1
		return
	fi
	if ! [ -e "$top/build-san/src/vma/.libs/libvma.so" ]; then
		note "offload under sanitizers: SKIP (no build-san library)"
		record "offload under sanitizers (no build)" 0 0 1
		return
	fi
	note "offload under sanitizers: tests/integration/asan_offload.sh build-san"
	"$top/tests/integration/asan_offload.sh" "$top/build-san" 2>&1 | tee "$logs/asan-offload.log"
	if grep -q '^SKIP' "$logs/asan-offload.log"; then
		record "offload under sanitizers (skipped)" 0 0 1
		return
	fi
	pass=$(grep -c '^PASS' "$logs/asan-offload.log")
	fail=$(grep -c '^FAIL' "$logs/asan-offload.log")
	[ "$pass" -gt 0 ] || [ "$fail" -gt 0 ] || fail=1
	record "offload under sanitizers" "$pass" "$fail" 0 \
		"$(sed -n 's/^FAIL: \([^ ]*\) .*/\1/p' "$logs/asan-offload.log" | tr '\n' ' ' | sed 's/ $//')"
}

missing=$("$top/contrib/deps.sh" missing)
if [ -n "$missing" ] && [ "$(id -u)" = 0 ] && [ -z "${NO_INSTALL:-}" ]; then
	note "installing missing packages:" $missing
	"$top/contrib/deps.sh" install || echo "warning: package installation failed"
	missing=$("$top/contrib/deps.sh" missing)
fi
[ -z "$missing" ] || echo "warning: packages not installed (sudo contrib/deps.sh install):" $missing

note "autogen"
if run_logged autogen ./autogen.sh; then
	build_and_check build "unit tests" --enable-werror
	built=$?
	distcheck_step
	packages_step
	if [ "${SKIP_SAN:-0}" != 1 ]; then
		ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
			UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
			build_and_check build-san "unit tests (ASan+UBSan)" --enable-sanitizers
	fi
	fuzz_step
	lib="$top/build/src/vma/.libs/libvma.so"
	if [ $built -eq 0 ] || [ -e "$lib" ]; then
		# Twice: testbed veths with TX checksum offload off and every
		# received checksum verified, as behind a real NIC; then veths as
		# containers leave them (offload on: kernel senders leave UDP/TCP
		# checksums partial) with VMA_RX_SW_CSUM at its default (auto).
		integration "integration tests" integration env VMA_RX_SW_CSUM=1
		[ "${SKIP_OFFLOAD_PASS:-0}" = 1 ] ||
			integration "integration tests (default veth offloads)" integration-offloads \
				env TB_VETH_OFFLOADS=default
		verbs_step
		san_offload_step
	else
		record "integration tests (no library)" 0 1
	fi
else
	record "autogen" 0 1
fi

echo
note "summary (logs in build-logs/)"
for line in "${summary[@]}"; do
	echo "   $line"
done
final="$total_pass passed, $total_fail failed"
[ $total_skip -gt 0 ] && final="$final, $total_skip skipped"
echo "$final"
[ $total_fail -eq 0 ]

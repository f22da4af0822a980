#!/bin/bash
# Runs the integration tests against one libvma.so.
#
#   tests/integration/run.sh [path/to/libvma.so]
#
# Environment: LIBVMA (instead of the argument), BUILDDIR (build tree with the
# helper programs; guessed from .../src/vma/.libs/libvma.so), TEST_TIMEOUT
# (seconds per test, default 180), ONLY (run only tests whose name matches
# this extended regex).
# Prints PASS/FAIL/SKIP per test, the log of each failed test, and ends with
# "N passed, N failed[, N skipped]". Exits 1 if anything failed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
LIBVMA=${1:-${LIBVMA:-}}
if [ -z "$LIBVMA" ]; then
	echo "usage: $0 path/to/libvma.so" >&2
	exit 2
fi
if [ ! -r "$LIBVMA" ]; then
	echo "run.sh: $LIBVMA: not found" >&2
	exit 2
fi
LIBVMA=$(cd "$(dirname "$LIBVMA")" && pwd)/$(basename "$LIBVMA")
if [ -z "${BUILDDIR:-}" ]; then
	case "$LIBVMA" in
	*/src/vma/.libs/*) BUILDDIR=${LIBVMA%/src/vma/.libs/*} ;;
	*/src/vma/*) BUILDDIR=${LIBVMA%/src/vma/*} ;;
	*) BUILDDIR= ;;
	esac
fi
export LIBVMA BUILDDIR
timeout_s=${TEST_TIMEOUT:-180}

# The C helpers are check_PROGRAMS; build them if `make check` has not.
helpers="mt_client mt_client_fortify fork_sock dlopen_sock errno_probe"
if [ -n "$BUILDDIR" ] && [ -f "$BUILDDIR/Makefile" ]; then
	targets=()
	for h in $helpers; do
		targets+=("tests/integration/$h")
	done
	make -C "$BUILDDIR" -s "${targets[@]}" >/dev/null 2>"${TMPDIR:-/tmp}/vma-it-build.$$" ||
		{ echo "run.sh: building the helper programs failed:"; cat "${TMPDIR:-/tmp}/vma-it-build.$$"; }
	rm -f "${TMPDIR:-/tmp}/vma-it-build.$$"
fi

echo "integration tests: library $LIBVMA, build dir ${BUILDDIR:-(none)}"
logdir=$(mktemp -d "${TMPDIR:-/tmp}/vma-it-logs.XXXXXX")
trap 'rm -rf "$logdir"' EXIT
passed=0 failed=0 skipped=0
# failed_checks LOG: a test's FAIL lines on one line (at most 20), also
# those a script prints for its sub-runs ("  [name] FAIL: ...",
# "  | FAIL: ...").
failed_checks() {
	grep -E '^ *(\| *)?(\[[^]]*\] *)?FAIL' "$1" | head -20 | tr -s ' ' | paste -sd ';' -
}
# t_*.sh test the library and read LIBVMA; the other scripts here test one
# part against the kernel and take the build dir as their argument.
for script in "$here"/t_*.sh "$here"/*.sh; do
	name=$(basename "$script" .sh)
	case $name in
	run | lib | pair_lib) continue ;;   # helpers, sourced by the tests
	t_*) name=${name#t_}; args=() ;;
	*)
		[ -n "$BUILDDIR" ] || continue
		args=("$BUILDDIR")
		;;
	esac
	case " ${done_names:-} " in *" $name "*) continue ;; esac
	done_names="${done_names:-} $name"
	if [ -n "${ONLY:-}" ] && ! [[ $name =~ $ONLY ]]; then
		continue
	fi
	log="$logdir/$name.log"
	start=$(date +%s)
	# A script that needs longer says so in a "# run.sh-timeout: SECONDS"
	# line (TEST_TIMEOUT, when set, still wins).
	t=$timeout_s
	want=$(sed -n 's/^# run\.sh-timeout: *\([0-9][0-9]*\).*/\1/p' "$script" | head -1)
	[ -z "${TEST_TIMEOUT:-}" ] && [ -n "$want" ] && t=$want
	# A test that compares times with the kernel's on this shared 2-core
	# host says "# run.sh-retry: 1": when it fails it runs once more, and
	# passes only if that run passes; the first run's failed checks are
	# printed all the same (RETRY=0 turns this off).
	tries=1
	grep -q '^# run\.sh-retry: *1' "$script" && [ "${RETRY:-1}" != 0 ] && tries=2
	first_fails=
	for try in $(seq $tries); do
		# timeout(1) puts the test in its own process group and signals
		# all of it, so servers a hung test left behind go too.
		(cd "${BUILDDIR:-.}" && exec timeout -k 5 "$t" bash "$script" "${args[@]}") </dev/null >"$log" 2>&1
		rc=$?
		[ $rc -eq 0 ] || [ $rc -eq 77 ] || [ "$try" = "$tries" ] && break
		first_fails="exit $rc: $(failed_checks "$log")"
	done
	took=$(( $(date +%s) - start ))
	case $rc in
	0)
		if [ -n "$first_fails" ]; then
			echo "PASS $name (${took}s, on its second run; the first: $first_fails)"
			retried="${retried:-} $name"
		else
			echo "PASS $name (${took}s)"
		fi
		passed=$((passed + 1))
		;;
	77)
		reason=$(grep 'SKIP' "$log" | tail -1 | sed -E 's/^.*SKIP:? *//; s/^\((.*)\)$/\1/')
		echo "SKIP $name (${reason:-no reason given})"
		skipped=$((skipped + 1))
		;;
	*)
		[ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "(timed out after ${t}s)" >>"$log"
		echo "FAIL $name (exit $rc, ${took}s)"
		[ -n "$first_fails" ] && echo "  first run: $first_fails"
		# the failed checks first: a long log may be cut where it is read
		echo "  failed checks: $(failed_checks "$log")"
		echo "---- log of $name ----"
		sed 's/^/  | /' "$log"
		echo "---- end of $name ----"
		failed=$((failed + 1))
		;;
	esac
done

[ -n "${retried:-}" ] && echo "passed on a second run:${retried}"
summary="$passed passed, $failed failed"
[ $skipped -gt 0 ] && summary="$summary, $skipped skipped"
echo "$summary"
[ $failed -eq 0 ]

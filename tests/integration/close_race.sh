#!/bin/bash
# close() racing a blocked recv()/accept() on the same fd (issue 12 item 7):
# tests/integration/close_race (see its header) under libvma in a private
# testbed (TB_PREFIX=clr, 198.18.0.2), 40 rounds: every blocked call ends
# with -1/EBADF, nothing crashes, no round hangs; then the same against the
# sanitizer build beside BUILDDIR (../build-san, as contrib/run_tests.sh
# makes it), where a use after free is a report.
# Usage: close_race.sh BUILDDIR [LIBVMA]   exit 0 pass, 1 fail, 77 skip.
# CLOSE_RACE_PRELOAD (the sanitizer runtimes) goes before the library.
set -u
BUILD=${1:?usage: close_race.sh BUILDDIR [LIBVMA]}
. "$(dirname "$0")/pair_lib.sh"
PAIR_LIB=${2:-}
pair_prereq tests/integration/close_race
PROG=$BUILD/tests/integration/close_race
TB_PREFIX_OVERRIDE=${CLR_TB_PREFIX:-}
trap 'exit 143' TERM INT
pair_up clr close_race
run() {  # run LABEL LIB PRELOAD
	local out rc
	out=$($B env LD_PRELOAD="${3:+$3:}$2" ASAN_OPTIONS=detect_leaks=0 VMA_TRACELEVEL=2 timeout 120 "$PROG" 198.18.0.2 40 2>&1)
	rc=$?
	echo "$out" | grep -vE "^ *VMA INFO" | tail -15 | sed "s/^/  [$1] /"
	if [ $rc = 0 ] && echo "$out" | grep -q "^ok 40"; then
		echo "PASS: $1: 40 rounds of close() under a blocked recv/accept held in a signal handler over 1100 later closes: each call ended with EBADF"
	else
		echo "FAIL: $1: close_race exit $rc"
		fail=1
	fi
}
run "libvma" "$LIB" "${CLOSE_RACE_PRELOAD:-}"
# The sanitizer build of contrib/run_tests.sh, when there is one: a use
# after free that the plain build survives is a report there.
SAN_LIB=$BUILD/../build-san/src/vma/.libs/libvma.so
if [ -z "${2:-}" ] && [ -e "$SAN_LIB" ] && readelf -d "$SAN_LIB" 2>/dev/null | grep -q 'NEEDED.*libasan'; then
	run "libvma under ASan+UBSan" "$(readlink -f "$SAN_LIB")" \
		"$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
else
	echo "INFO: no sanitizer build beside $BUILD: the ASan run is skipped"
fi
exit $fail

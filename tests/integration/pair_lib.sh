# Shared set-up of the scripts that test against a kernel peer on the
# two-namespace testbed (contrib/testbed.sh "pair": 198.18.0.1 in
# $TB_PREFIX-a, 198.18.0.2 in $TB_PREFIX-b). Sourced by the script, either
# after it has checked its own prerequisites, or first, to check them with
# pair_prereq:
#   pair_prereq [TARGET...]
#                         SKIP (exit 77) unless root; makes BUILD (the
#                         script's BUILDDIR) absolute; sets LIB to BUILD's
#                         libvma.so (PAIR_LIB instead, when the script set
#                         it); builds each TARGET (a make target of BUILD,
#                         e.g. tests/integration/sock_params) that is
#                         missing; then "SKIP: no FILE" unless LIB and
#                         every BUILD/TARGET exist.
#   pair_need FILE...     "SKIP: no FILE" (exit 77) for the first missing.
#   pair_up PREFIX NAME   brings the pair up under TB_PREFIX
#                         (TB_PREFIX_OVERRIDE, the script's own override
#                         variable, wins over PREFIX) and sets WORK (a
#                         temporary directory /tmp/NAME.XXXXXX), A and B
#                         (nsenter prefixes) and an EXIT trap, pair_cleanup.
#                         Exit 77 if it cannot.
#   pair_cleanup          kills the server pid in SRV with PAIR_KILL_SIGNAL
#                         (default KILL; TERM for plain kill) and waits for
#                         it, calls pair_extra_cleanup when the script
#                         defines it (more pids, files or settings of its
#                         own: the testbed is still up then), takes the
#                         pair down and removes WORK (kept when
#                         PAIR_KEEP_WORK is not empty).
#   pair_wait_ready FILE PID [TRIES] [STEP]
#                         waits until FILE has a line starting "ready",
#                         looking every STEP (0.1) seconds, TRIES (100)
#                         times, and not after PID ended: 0 when it came.
#   check RC TEXT         PASS when RC is 0, else FAIL (and fail=1).
#   snmp TABLE FIELD      a field of the server namespace's /proc/net/snmp
#                         (e.g. "Tcp: 11" InSegs, "Udp: 2" InDatagrams).
# PAIR_LIB, PAIR_KILL_SIGNAL and PAIR_KEEP_WORK are set here: a script sets
# its own after sourcing this file.
# shellcheck shell=bash disable=SC2034 # A, B, WORK, LIB, fail: the script's
PAIR_TESTBED=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../contrib" && pwd)/testbed.sh
PAIR_LIB=""
PAIR_KILL_SIGNAL=KILL
PAIR_KEEP_WORK=""
SRV=""
fail=0

pair_need() {
	local f
	for f in "$@"; do [ -e "$f" ] || { echo "SKIP: no $f"; exit 77; }; done
}

# shellcheck disable=SC2120 # no TARGET: only root and the library
pair_prereq() {
	local t
	[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
	BUILD=$(cd "$BUILD" && pwd)
	LIB=${PAIR_LIB:-$BUILD/src/vma/.libs/libvma.so}
	for t in "$@"; do
		[ -x "$BUILD/$t" ] || make -C "$BUILD" -s "$t" >/dev/null 2>&1
	done
	pair_need "$LIB" "${@/#/$BUILD/}"
}

pair_wait_ready() {
	local file=$1 pid=$2 tries=${3:-100} step=${4:-0.1} _
	for _ in $(seq "$tries"); do
		grep -q '^ready' "$file" 2>/dev/null && return 0
		kill -0 "$pid" 2>/dev/null || break
		sleep "$step"
	done
	grep -q '^ready' "$file" 2>/dev/null
}

pair_cleanup() {
	[ -n "$SRV" ] && kill -"$PAIR_KILL_SIGNAL" "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
	declare -F pair_extra_cleanup >/dev/null && pair_extra_cleanup
	bash "$PAIR_TESTBED" down >/dev/null 2>&1
	[ -n "$PAIR_KEEP_WORK" ] || rm -rf "$WORK"
}

pair_up() {
	export TB_PREFIX=${TB_PREFIX_OVERRIDE:-$1}
	WORK=$(mktemp -d "/tmp/$2.XXXXXX")
	trap pair_cleanup EXIT
	bash "$PAIR_TESTBED" up pair >/dev/null || { echo "SKIP: testbed up pair failed"; exit 77; }
	A="nsenter --net=/run/netns/$TB_PREFIX-a"
	B="nsenter --net=/run/netns/$TB_PREFIX-b"
}

check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

snmp() { $B awk -v t="$1" -v f="$2" '$1 == t {n++; if (n == 2) print $f}' /proc/net/snmp; }

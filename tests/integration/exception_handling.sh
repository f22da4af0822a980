#!/bin/bash
# VMA_EXCEPTION_HANDLING: what each mode does when an application sets an
# option our stack does not implement (SO_PRIORITY) on offloaded sockets.
# Usage: exception_handling.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/sock_params serves TCP and UDP echo in EXH-a (kernel);
# in EXH-b `sock_params except` (libvma, default log level) sets SO_PRIORITY
# on an established connection, on a TCP socket before connect() and on a
# bound UDP socket, exchanging echoes before and after, and reads the
# namespace's kernel counters to tell which path carried each (see its
# header). Once per mode:
#   -1  every call succeeds, every socket stays offloaded, nothing logged
#    0  every call succeeds; the new TCP socket and the UDP socket move to
#       the kernel, the connection stays offloaded; nothing logged
#    1  as 0, with one error line per socket naming fd, option and mode
#   2  every call fails with ENOPROTOOPT (send(MSG_OOB): EOPNOTSUPP), the
#       sockets stay offloaded; error lines
#    3  an error line, then the process dies of SIGABRT at the first call
set -u
BUILD=${1:?usage: exception_handling.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/sock_params
PROG=$BUILD/tests/integration/sock_params
TB_PREFIX_OVERRIDE=${EXH_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM
pair_up exh exception_handling
PORT=16400
ulimit -c 0   # mode 3 aborts on purpose

$A "$PROG" serve $PORT >"$WORK/serve" 2>&1 &
SRV=$!
for _ in $(seq 50); do grep -q '^serving' "$WORK/serve" && break; sleep 0.1; done
grep -q '^serving' "$WORK/serve" || { echo "FAIL: the echo peer did not start"; cat "$WORK/serve"; exit 1; }

for mode in -1 0 1 2 3; do
	out=$WORK/out.$mode err=$WORK/err.$mode
	# The default log level: only what a user would see.
	# (In a subshell: mode 3's abort is expected, not news for the log.)
	($B timeout 60 env -u VMA_TRACELEVEL LD_PRELOAD="$LIB" VMA_EXCEPTION_HANDLING=$mode \
		"$PROG" except 198.18.0.1 198.18.0.2 $PORT $mode >"$out" 2>"$err") 2>/dev/null
	rc=$?
	grep -E '^(FAIL|INFO):' "$out" | sed "s/^/  [mode $mode] /"
	grep -E 'is not supported on an offloaded socket' "$err" | sed "s/^/  [mode $mode] stderr: /"
	n=$(grep -c '^PASS:' "$out") f=$(grep -c '^FAIL:' "$out")
	lines=$(grep -c "VMA ERROR: fd [0-9]*: setsockopt(SOL_SOCKET, SO_PRIORITY) is not supported on an offloaded socket.*(VMA_EXCEPTION_HANDLING=$mode)" "$err")
	any=$(grep -c 'is not supported on an offloaded socket' "$err")
	others=$(grep -E 'VMA (ERROR|WARNING|PANIC)' "$err" | grep -v 'WARNING: [*]' | grep -vc 'is not supported on an offloaded socket')
	case $mode in
	-1 | 0)
		[ $rc = 0 ] && [ "$f" = 0 ] && [ "$n" -ge 14 ]
		check $? "mode $mode: every call succeeds, the sockets take the expected path ($n checks pass, $f fail, exit $rc)"
		[ "$any" = 0 ] && [ "$others" = 0 ]
		check $? "mode $mode: nothing logged at the default level ($any exception line(s), $others other warning(s)/error(s))"
		;;
	1)
		[ $rc = 0 ] && [ "$f" = 0 ] && [ "$n" -ge 14 ]
		check $? "mode 1: every call succeeds; the new TCP socket and the UDP socket move to the kernel ($n checks pass, $f fail, exit $rc)"
		[ "$lines" = 3 ] && [ "$any" = 3 ] && [ "$others" = 0 ] &&
			[ "$(grep -c 'moves to the kernel path' "$err")" = 2 ] &&
			[ "$(grep -c 'cannot move to the kernel path (its connection lives in our stack)' "$err")" = 1 ]
		check $? "mode 1: one error line per socket: 2 moved to the kernel, 1 that cannot move (got $lines)"
		;;
	2)
		[ $rc = 0 ] && [ "$f" = 0 ] && [ "$n" -ge 15 ]
		check $? "mode 2: the calls fail with ENOPROTOOPT / EOPNOTSUPP, the sockets stay offloaded ($n checks pass, $f fail, exit $rc)"
		oob=$(grep -c 'VMA ERROR: fd [0-9]*: send(MSG_OOB) (urgent data) is not supported on an offloaded socket: the call fails with EOPNOTSUPP' "$err")
		[ "$lines" = 3 ] && [ "$oob" = 1 ] && [ "$(grep -c 'the call fails with ENOPROTOOPT' "$err")" = 3 ]
		check $? "mode 2: an error line per failed call (got $lines for SO_PRIORITY, $oob for MSG_OOB)"
		;;
	3)
		# 134: killed by SIGABRT (128 + 6), at the first SO_PRIORITY.
		[ $rc = 134 ] && grep -q '^INFO: SO_PRIORITY on the connection' "$out" &&
			! grep -q 'connection: echoes after the option' "$out"
		check $? "mode 3: the process dies of SIGABRT at the first unsupported call (exit $rc)"
		[ "$lines" = 1 ] && grep -q 'aborting the process (VMA_EXCEPTION_HANDLING=3)' "$err"
		check $? "mode 3: the error line comes before the abort (got $lines)"
		;;
	esac
done
exit $fail

#!/bin/bash
# VMA_AVOID_SYS_CALLS_ON_TCP_FD: on an offloaded TCP connection, the
# options, O_NONBLOCK and FIONBIO calls libvma serves itself stop reaching
# the kernel, and still read back and act as Linux's.
# Usage: avoid_sys_calls.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/sock_params serves TCP echo in AVS-a (kernel); in AVS-b
# `sock_params avoid` connects and makes N rounds of setsockopt/getsockopt
# (TCP_NODELAY, SO_KEEPALIVE), fcntl(F_GETFL/F_SETFL) and ioctl(FIONBIO),
# checking every value read back, then what O_NONBLOCK and blocking do to
# recv, the keepalive options and Linux's errors, and whether options set on
# an offloaded listener reach a connection the kernel accepts for it (see
# its header). Runs,
# each under strace -c counting those four system calls:
#   kernel                      no libvma: the reference, and the counts of
#                               an application that reaches the kernel
#   libvma, parameter 0         offloaded; every call still reaches the kernel
#   libvma, parameter 1         offloaded; (nearly) none reaches the kernel
set -u
BUILD=${1:?usage: avoid_sys_calls.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/sock_params
PROG=$BUILD/tests/integration/sock_params
command -v strace >/dev/null || { echo "SKIP: needs strace (contrib/deps.sh)"; exit 77; }
TB_PREFIX_OVERRIDE=${AVS_TB_PREFIX:-}
PAIR_KILL_SIGNAL=TERM
pair_up avs avoid_sys_calls
PORT=16300
ROUNDS=2000

$A "$PROG" serve $PORT >"$WORK/serve" 2>&1 &
SRV=$!
for _ in $(seq 50); do grep -q '^serving' "$WORK/serve" && break; sleep 0.1; done
grep -q '^serving' "$WORK/serve" || { echo "FAIL: the echo peer did not start"; cat "$WORK/serve"; exit 1; }

# count FILE SYSCALL: the calls strace -c counted (0 when none).
count() { awk -v s="$2" '$NF == s { n = $4 } END { print n + 0 }' "$1"; }

# run LABEL ENV...: the client under strace; sets set get fcntl ioctl.
run() {
	local label=$1 out=$WORK/$1.out trace=$WORK/$1.strace
	shift
	# seccomp-bpf: only the four counted calls stop the process, so its
	# polling loops run at full speed.
	$B strace -f --seccomp-bpf -c -o "$trace" -e trace=setsockopt,getsockopt,fcntl,ioctl \
		env "$@" "$PROG" avoid 198.18.0.1 198.18.0.2 $PORT $ROUNDS >"$out" 2>&1
	local rc=$?
	set=$(count "$trace" setsockopt) get=$(count "$trace" getsockopt)
	fcntl=$(count "$trace" fcntl) ioctl=$(count "$trace" ioctl)
	echo "  [$label] the kernel saw: $set setsockopt, $get getsockopt, $fcntl fcntl, $ioctl ioctl"
	grep -E '^(FAIL|INFO):' "$out" | sed "s/^/  [$label] /"
	grep -E 'VMA (ERROR|WARNING)' "$out" | grep -v 'WARNING: [*]' | head -5 | sed "s/^/  [$label] /"
	local n f
	n=$(grep -c '^PASS:' "$out") f=$(grep -c '^FAIL:' "$out")
	[ "$rc" = 0 ] && [ "$f" = 0 ] && [ "$n" -gt 0 ]
	check $? "$label: $n value and behaviour checks pass ($f fail, exit $rc)"
	offloaded=$(sed -n 's/^INFO: offloaded //p' "$out")
}

# The four calls of the rounds in the kernel run, and at least as many
# under libvma with the parameter off.
want_all() {
	[ "$set" -ge $((2 * ROUNDS)) ] && [ "$get" -ge $((2 * ROUNDS)) ] && [ "$fcntl" -ge $((4 * ROUNDS)) ] &&
		[ "$ioctl" -ge "$ROUNDS" ]
	check $? "$1: the kernel sees every call (>= $((2 * ROUNDS)) setsockopt and getsockopt, >= $((4 * ROUNDS)) fcntl, >= $ROUNDS ioctl)"
}

run kernel
want_all "kernel"

run libvma-0 LD_PRELOAD="$LIB" VMA_TRACELEVEL=warn VMA_AVOID_SYS_CALLS_ON_TCP_FD=0
[ "$offloaded" = yes ]; check $? "libvma, parameter 0: the connection is offloaded"
want_all "libvma, parameter 0"

run libvma-1 LD_PRELOAD="$LIB" VMA_TRACELEVEL=warn VMA_AVOID_SYS_CALLS_ON_TCP_FD=1
[ "$offloaded" = yes ]; check $? "libvma, parameter 1: the connection is offloaded"
# What remains: libvma's own set-up (rings, netlink, the kernel socket
# under the fd), one F_GETFL per socket, and the checks' few calls for
# options it does not serve (SO_RCVTIMEO) and odd arguments (EFAULT) —
# a few dozen; the limit is 1% of the 9 calls per round.
limit=$((9 * ROUNDS / 100))
total=$((set + get + fcntl + ioctl))
[ "$total" -lt "$limit" ]
check $? "libvma, parameter 1: the kernel sees nearly none of the $((9 * ROUNDS)) calls ($total < $limit)"

exit $fail

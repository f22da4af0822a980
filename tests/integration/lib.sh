# Shared helpers for the integration tests; sourced by every t_*.sh.
#
# Contract of a test script: it reads LIBVMA (path of libvma.so) and BUILDDIR
# (the build tree holding the helper programs) from the environment, and
# exits 0 (pass), 1 (fail) or 77 (skipped: a tool it needs is absent, with
# the reason printed as "SKIP: ..." on its last line).

set -u

: "${LIBVMA:?LIBVMA must name libvma.so}"
: "${BUILDDIR:=}"
TESTDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HELPERS=${BUILDDIR:+$BUILDDIR/tests/integration}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/vma-it.XXXXXX")
BG_PIDS=()

cleanup() {
	local pid
	for pid in "${BG_PIDS[@]}"; do
		kill "$pid" 2>/dev/null
	done
	for pid in "${BG_PIDS[@]}"; do
		wait "$pid" 2>/dev/null
	done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

log() { printf '%s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*"; exit 1; }
skip() { printf 'SKIP: %s\n' "$*"; exit 77; }

# need TOOL...: skip unless every tool is on PATH.
need() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || skip "$t not installed"
	done
}

# need_helper NAME: path of a helper program built by `make check`.
need_helper() {
	local p="$HELPERS/$1"
	[ -n "$HELPERS" ] && [ -x "$p" ] ||
		fail "helper program $1 not built (run 'make check' in the build dir, or set BUILDDIR)"
	printf '%s\n' "$p"
}

# preload CMD...: run CMD with the library preloaded.
preload() { LD_PRELOAD="$LIBVMA" "$@"; }

# start_bg CMD...: start CMD in the background; it is killed on exit.
start_bg() {
	"$@" &
	BG_PIDS+=("$!")
	LAST_PID=$!
}

# free_port: a TCP and UDP port on 127.0.0.1 nobody uses right now. Taken
# below the kernel's ephemeral range so autobinding cannot race us for it.
free_port() {
	local p tries=0
	while [ $tries -lt 200 ]; do
		p=$((20000 + RANDOM % 12000))
		if ! ss -Htuan 2>/dev/null | awk '{print $5}' | grep -q ":$p\$"; then
			printf '%s\n' "$p"
			return 0
		fi
		tries=$((tries + 1))
	done
	fail "no free port found"
}

# wait_listen PORT [SECONDS]: wait until something listens on TCP PORT.
wait_listen() {
	local port=$1 limit=$((${2:-10} * 10)) i=0
	while [ $i -lt $limit ]; do
		ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
		sleep 0.1
		i=$((i + 1))
	done
	fail "nothing listening on port $port after ${2:-10}s"
}

# wait_file FILE [SECONDS]: wait until FILE exists and is not empty.
wait_file() {
	local f=$1 limit=$((${2:-10} * 10)) i=0
	while [ $i -lt $limit ]; do
		[ -s "$f" ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	fail "$f not written after ${2:-10}s"
}

# ratio_ok A B: true when A and B are within a factor of 10 of each other.
ratio_ok() {
	awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > 0 && b > 0 && a / b < 10 && b / a < 10) }'
}

[ -r "$LIBVMA" ] || fail "library $LIBVMA not found"
case "$LIBVMA" in /*) ;; *) LIBVMA="$PWD/$LIBVMA" ;; esac
need ss

#!/bin/bash
# g. The startup banner, and warnings for a bad VMA_* value and a bad
# libvma.conf line; the program runs normally in every case.
. "$(dirname "$0")/lib.sh"

# expect_in FILE TEXT...: every TEXT occurs in FILE (fixed strings).
expect_in() {
	local f=$1 t
	shift
	for t in "$@"; do
		grep -qF -- "$t" "$f" || { cat "$f"; fail "stderr lacks '$t'"; }
	done
}

LD_PRELOAD="$LIBVMA" /bin/true 2>"$TMP/banner" || fail "/bin/true exited $? under LD_PRELOAD"
expect_in "$TMP/banner" "VMA INFO" "VMA_VERSION" "[VMA_TRACELEVEL]"
log "ok: banner"

out=$(VMA_RX_POLL=banana LD_PRELOAD="$LIBVMA" sh -c 'echo alive' 2>"$TMP/badvalue") ||
	fail "program failed with VMA_RX_POLL=banana"
[ "$out" = alive ] || fail "program output '$out' with VMA_RX_POLL=banana"
grep -E 'VMA_RX_POLL' "$TMP/badvalue" | grep -q 'banana' ||
	{ cat "$TMP/badvalue"; fail "no warning line naming VMA_RX_POLL and banana"; }
log "ok: bad value warning: $(grep -m1 banana "$TMP/badvalue")"

conf="$TMP/libvma.conf"
cat >"$conf" <<'CONF'
# test configuration: line 3 is not a statement
use os tcp_server *:5001
this line is not valid at all
use vma udp_receiver *:*
CONF
out=$(VMA_CONFIG_FILE="$conf" LD_PRELOAD="$LIBVMA" sh -c 'echo alive' 2>"$TMP/badconf") ||
	fail "program failed with a bad libvma.conf"
[ "$out" = alive ] || fail "program output '$out' with a bad libvma.conf"
grep -F -- "$conf" "$TMP/badconf" | grep -Eq '(^|[^0-9])3([^0-9]|$)' ||
	{ cat "$TMP/badconf"; fail "no warning naming $conf and line 3"; }
log "ok: bad conf line warning: $(grep -F -m1 -- "$conf" "$TMP/badconf")"

# IPv6 sockets stay with the kernel: the first one that listens, connects or
# (UDP) binds outside loopback gets one warning naming its fd and what to
# do; the next ones are logged at debug level; loopback gets none. A
# dual-stack [::] listener still serves IPv4 (through the kernel).
if command -v python3 >/dev/null && python3 -c 'import socket; socket.socket(socket.AF_INET6).bind(("::1", 0))' 2>/dev/null; then
	cat >"$TMP/v6.py" <<'PY'
import socket, sys
def listener(fam, addr):
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.bind((addr, 0))
    s.listen(4)
    return s
if sys.argv[1] == "loopback":
    a = listener(socket.AF_INET6, "::1")
    b = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    b.bind(("::1", 0))
    c = listener(socket.AF_INET, "127.0.0.1")
    print("loopback ok", file=sys.stderr)
    sys.exit(0)
first = listener(socket.AF_INET6, "::")
print("fd %d" % first.fileno())
second = listener(socket.AF_INET6, "::")
u = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
u.bind(("::", 0))
port = first.getsockname()[1]
c = socket.create_connection(("127.0.0.1", port), timeout=5)
peer, _ = first.accept()
c.sendall(b"through the kernel")
data = peer.recv(100)
print("ipv4 via [::]: %s" % data.decode())
PY
	out=$(LD_PRELOAD="$LIBVMA" python3 "$TMP/v6.py" any 2>"$TMP/v6.err") || { cat "$TMP/v6.err"; fail "IPv6 listener program failed"; }
	fd=$(sed -n 's/^fd //p' <<<"$out")
	n=$(grep -c "on an IPv6 socket (AF_INET6)" "$TMP/v6.err")
	grep -q "ipv4 via \[::\]: through the kernel" <<<"$out" || { echo "$out"; fail "IPv4 through the [::] listener"; }
	[ "$n" = 1 ] && grep "on an IPv6 socket" "$TMP/v6.err" | grep -q "fd $fd: listen()" &&
		grep "on an IPv6 socket" "$TMP/v6.err" | grep -q "iperf3 -s -B" ||
		{ cat "$TMP/v6.err"; fail "want one IPv6 warning naming fd $fd and listen(), got $n"; }
	log "ok: IPv6 warning: $(grep -m1 -o 'fd [0-9]*: listen() on an IPv6 socket[^:]*' "$TMP/v6.err"), once for 3 sockets"
	LD_PRELOAD="$LIBVMA" python3 "$TMP/v6.py" loopback 2>"$TMP/v6lo.err" || { cat "$TMP/v6lo.err"; fail "loopback program failed"; }
	! grep -q "IPv6 socket" "$TMP/v6lo.err" || { cat "$TMP/v6lo.err"; fail "warning for IPv6 loopback sockets"; }
	log "ok: no IPv6 warning for loopback ([::1] TCP and UDP)"
else
	log "ok: IPv6 warning not checked (no python3 or no IPv6 here)"
fi

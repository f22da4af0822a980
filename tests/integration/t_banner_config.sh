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

#!/bin/bash
# The calls of a preloaded program really reach libvma: ask the dynamic
# loader (LD_DEBUG=bindings) where each socket call of mt_client_fortify was
# bound, including the fortified __*_chk variants and epoll. Without this,
# every other test would also pass with an empty library.
. "$(dirname "$0")/lib.sh"

prog=$(need_helper mt_client_fortify) || exit 1
LD_DEBUG=bindings LD_DEBUG_OUTPUT="$TMP/ld" preload "$prog" >/dev/null ||
	fail "mt_client_fortify under LD_PRELOAD"
cat "$TMP"/ld.* >"$TMP/bindings"
lib_name=$(basename "$LIBVMA")

missing=()
for sym in socket bind listen accept connect getsockname setsockopt close \
	send recv __recv_chk read __read_chk write sendto __recvfrom_chk sendmsg recvmsg \
	readv writev __poll_chk epoll_create1 epoll_ctl epoll_wait; do
	line=$(grep "binding file $prog \[0\] to .*: normal symbol \`$sym'" "$TMP/bindings" | head -1)
	case "$line" in
	*"/$lib_name "*) ;;
	"") missing+=("$sym(never called?)") ;;
	*) missing+=("$sym->$(sed -n 's/.* to \([^ ]*\) .*/\1/p' <<<"$line")") ;;
	esac
done
[ ${#missing[@]} -eq 0 ] || fail "not bound to $lib_name: ${missing[*]}"
log "ok: all socket calls of mt_client_fortify bound to $lib_name"

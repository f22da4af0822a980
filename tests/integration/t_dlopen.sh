#!/bin/bash
# f. The library loaded with dlopen() (no LD_PRELOAD), its socket calls
# taken with dlsym() and used for a loopback TCP exchange.
. "$(dirname "$0")/lib.sh"

prog=$(need_helper dlopen_sock) || exit 1
"$prog" "$LIBVMA" || fail "dlopen_sock $LIBVMA"

#!/bin/bash
# h. Failing calls fail with the same errno, and fcntl/getsockname answer the
# same, with and without the library.
. "$(dirname "$0")/lib.sh"

prog=$(need_helper errno_probe) || exit 1
"$prog" >"$TMP/kernel" || { cat "$TMP/kernel"; fail "errno_probe without the library"; }
preload "$prog" >"$TMP/vma" || { cat "$TMP/vma"; fail "errno_probe with the library"; }
if ! diff -u "$TMP/kernel" "$TMP/vma"; then
	fail "outcomes differ with the library (diff above: - kernel, + libvma)"
fi
log "ok: $(wc -l <"$TMP/kernel") outcomes identical"

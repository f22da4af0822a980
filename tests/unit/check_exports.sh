#!/bin/sh
# libvma.so exports the interposed libc functions and the Extra API entry
# points, nothing else: an extra symbol is an internal an application (or
# another preloaded library) could bind to by accident, a missing one a call
# that silently goes to libc. Fails when
# - the dynamic symbols of the built library (nm -D --defined-only) differ
#   from the expected list: the names of src/vma/os/os_libc.def
#   this glibc has (its #if guards, through the C preprocessor), plus the
#   Extra API names of src/vma/libvma.map;
# - the REDIRECT_EXPORT definitions in src/vma/redirect/*.c, or the
#   interposed part of src/vma/libvma.map (the version script), name other
#   functions than os_libc.def.
# Fix: a new interposed function goes into os_libc.def, its
# REDIRECT_EXPORT definition and libvma.map together; a new Extra API
# function into libvma.map under "EXTRA API EXPORTS".
srcdir=${srcdir:-.}
lib=${LIBVMA_SO:-src/vma/.libs/libvma.so}
cc=${CC:-cc}
map=$srcdir/src/vma/libvma.map
redirect=$srcdir/src/vma/redirect
libc_def=$srcdir/src/vma/os/os_libc.def

if ! [ -f "$lib" ]; then
	echo "$lib: not built"
	exit 1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# Every name of os_libc.def, guarded or not.
sed -n 's/^OS_LIBC(\([A-Za-z0-9_]*\)).*/\1/p' "$libc_def" | sort >"$tmp/def_all"
# The names this glibc has: the .def through the preprocessor, with the
# guards of os/os.h.
printf '%s\n' '#include "os/os.h"' \
	'#define OS_LIBC(name) vma_interposed name' \
	'#include "os/os_libc.def"' >"$tmp/def.c"
if ! $cc -E -D_GNU_SOURCE -I"$srcdir/src/vma" -I"$srcdir/include" "$tmp/def.c" >"$tmp/def.i"; then
	echo "cannot preprocess os_libc.def with $cc -E"
	exit 1
fi
sed -n 's/^ *vma_interposed \([A-Za-z0-9_]*\) *$/\1/p' "$tmp/def.i" | sort >"$tmp/def_here"
# The functions defined with REDIRECT_EXPORT (a definition starts a line).
sed -n 's/^REDIRECT_EXPORT [^(]*[ *]\([A-Za-z0-9_]*\)(.*/\1/p' "$redirect"/redirect_*.c | sort >"$tmp/defined"
# The version script: "name;" lines before the EXTRA API EXPORTS comment
# are interposed functions, after it (up to "local:") Extra API ones.
awk -v interposed="$tmp/map_interposed" -v extra="$tmp/map_extra" '
	/EXTRA API EXPORTS/ { part = "extra" }
	/^[ \t]*local:/ { part = "done" }
	/^[ \t]*global:/ { part = "interposed"; next }
	/^[ \t]*[A-Za-z_][A-Za-z0-9_]*;[ \t]*$/ {
		name = $0; gsub(/[ \t;]/, "", name)
		if (part == "interposed") print name > interposed
		else if (part == "extra") print name > extra
	}' "$map"
touch "$tmp/map_interposed" "$tmp/map_extra"
sort -o "$tmp/map_interposed" "$tmp/map_interposed"
sort -o "$tmp/map_extra" "$tmp/map_extra"

nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort >"$tmp/exported"
sort -u "$tmp/def_here" "$tmp/map_extra" >"$tmp/expected"

bad=0
# compare WHAT EXPECTED-FILE ACTUAL-FILE LABEL-MISSING LABEL-EXTRA
compare() {
	missing=$(comm -23 "$2" "$3" | tr '\n' ' ')
	extra=$(comm -13 "$2" "$3" | tr '\n' ' ')
	if [ -n "$missing" ]; then
		echo "FAIL $1: $4: $missing"
		bad=$((bad + 1))
	fi
	if [ -n "$extra" ]; then
		echo "FAIL $1: $5: $extra"
		bad=$((bad + 1))
	fi
}
compare "redirect/*.c" "$tmp/def_all" "$tmp/defined" \
	"in os_libc.def, no REDIRECT_EXPORT definition" \
	"defined with REDIRECT_EXPORT, not in os_libc.def"
compare "libvma.map" "$tmp/def_all" "$tmp/map_interposed" \
	"in os_libc.def, not in the version script" \
	"in the version script's interposed part, not in os_libc.def"
compare "$lib" "$tmp/expected" "$tmp/exported" \
	"not exported" "exported, neither interposed nor Extra API"

# A versioned export (socket@@NODE) would no longer bind the application's
# glibc-versioned references: the node must stay anonymous (libvma.map).
if grep -q '@' "$tmp/exported"; then
	echo "FAIL $lib: versioned exports (the node in libvma.map must stay anonymous):" \
		"$(grep '@' "$tmp/exported" | head -3 | tr '\n' ' ')"
	bad=$((bad + 1))
fi

if [ "$bad" -gt 0 ]; then
	echo "$lib exports $(wc -l <"$tmp/exported") symbols, $(wc -l <"$tmp/expected") expected"
	exit 1
fi
echo "$lib exports exactly the $(wc -l <"$tmp/def_here") interposed functions and $(wc -l <"$tmp/map_extra") Extra API ones"

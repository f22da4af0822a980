#!/bin/sh
# Inside libvma.so the names libvma interposes (socket, close, sendto, poll...:
# the interposed part of src/vma/libvma.map) are our own wrappers: a module
# that calls one by name re-enters the fd table, the lazy init, even the lane
# it is building, and pays a table lookup on what should be a plain syscall
# (a ring's TX kick). Every module reaches libc's own versions through
# src/vma/os/ (docs/architecture.md). Fails when an object of the core
# library (src/vma/.libs/libvma_core.a, everything but the constructor and
# the interposed symbols) other than those of os/ leaves one of these names
# undefined (nm -u), and says which object, which names and how to fix it.
srcdir=${srcdir:-.}
core=${LIBVMA_CORE:-src/vma/.libs/libvma_core.a}
map=$srcdir/src/vma/libvma.map

if ! [ -f "$core" ]; then
	echo "$core: not built"
	exit 1
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# The interposed names: "name;" lines of the version script between
# "global:" and the EXTRA API EXPORTS comment.
awk '
	/EXTRA API EXPORTS/ { part = "done" }
	/^[ \t]*local:/ { part = "done" }
	/^[ \t]*global:/ { part = "interposed"; next }
	part == "interposed" && /^[ \t]*[A-Za-z_][A-Za-z0-9_]*;[ \t]*$/ {
		name = $0; gsub(/[ \t;]/, "", name); print name
	}' "$map" | sort -u >"$tmp/interposed"
if [ "$(wc -l <"$tmp/interposed")" -lt 50 ]; then
	echo "FAIL $map: found only $(wc -l <"$tmp/interposed") interposed names (the parser lost its way)"
	exit 1
fi

# "object name" for every undefined symbol of every member of the archive
# (symbol versions, if any, stripped).
if ! nm -A -u "$core" >"$tmp/nm"; then
	echo "FAIL nm -A -u $core"
	exit 1
fi
sed -n 's/^[^:]*:\([^:]*\): *U \([A-Za-z0-9_]*\).*/\1 \2/p' "$tmp/nm" | sort -k2,2 >"$tmp/undefined"
objects=$(cut -d' ' -f1 "$tmp/undefined" | sort -u | wc -l)
if [ "$objects" -lt 10 ]; then
	echo "FAIL $core: undefined symbols of only $objects objects read"
	exit 1
fi

# The source file of an object (libvma_core_la-ring_xdp.o: src/vma/*/ring_xdp.c).
source_of() {
	base=${1#libvma_core_la-}
	base=${base%.o}
	for f in "$srcdir"/src/vma/*/"$base".c "$srcdir"/src/vma/"$base".c; do
		if [ -f "$f" ]; then
			echo "${f#"$srcdir"/}"
			return
		fi
	done
	echo "?/$base.c"
}

join -1 2 -2 1 "$tmp/undefined" "$tmp/interposed" | awk '{ print $2, $1 }' | sort -u >"$tmp/calls"
bad=0
for obj in $(cut -d' ' -f1 "$tmp/calls" | sort -u); do
	src=$(source_of "$obj")
	case $src in
	src/vma/os/*) continue ;;       # the table of originals itself
	src/vma/redirect/*) continue ;; # the interposition layer (libvma.so only)
	esac
	names=$(awk -v o="$obj" '$1 == o { print $2 }' "$tmp/calls" | tr '\n' ' ' | sed 's/ $//')
	echo "FAIL $src ($obj) calls $names by name: inside libvma.so these are libvma's own wrappers."
	bad=$((bad + 1))
done
if [ "$bad" -gt 0 ]; then
	echo "Fix: call libc's own version through src/vma/os/os.h, e.g. OS_CALL(close, fd) for close(fd)," \
		"OS_CALL(sendto, fd, buf, len, flags, to, tolen) for sendto(...), OS_FN(signal) for a pointer" \
		"(docs/architecture.md, \"One way to the kernel\")."
	exit 1
fi
echo "$objects core objects read: none but os/ calls any of the $(wc -l <"$tmp/interposed") interposed names by name"

#!/bin/sh
# Run by make dist (dist-hook): the tarball is the tree git tracks plus what
# autotools generate, no more, no less. Fails when
# - a tracked file is not in the tarball: a test or doc a user of the tarball
#   would miss (tests/integration/run.sh runs every *.sh it finds). Fix: list
#   it in EXTRA_DIST (or a dist_ variable) in its folder's module.am;
# - the tarball has a file git does not track: a build output or a local
#   file that slipped in. Fix: name files, not folders, in EXTRA_DIST; or
#   git add the file if it belongs to the tree.
# Usage: check_dist_files.sh SRCDIR DISTDIR. Outside a git checkout (a build
# from the tarball itself) there is nothing to compare with: it passes.
srcdir=${1:?usage: check_dist_files.sh SRCDIR DISTDIR}
distdir=${2:?usage: check_dist_files.sh SRCDIR DISTDIR}

top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null) || top=
if [ -z "$top" ] || [ "$(cd "$srcdir" && pwd -P)" != "$(cd "$top" && pwd -P)" ]; then
	echo "check_dist_files: $srcdir is not the top of a git checkout, not compared"
	exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# Tracked and present (a file deleted but not yet committed is not missed).
# Not shipped on purpose: git's own file, and m4/.keep, which only keeps the
# folder in git (the tarball's m4/ holds libtool's macros).
git -C "$srcdir" ls-files | while read -r f; do
	case $f in
	.gitignore | */.gitignore | m4/.keep) continue ;;
	esac
	[ -e "$srcdir/$f" ] && echo "$f"
done | sort >"$tmp/tracked"

(cd "$distdir" && find . -type f -o -type l) | sed 's|^\./||' | while read -r f; do
	case $f in
	# autoreconf's output, which is what a tarball has and a checkout lacks
	configure | aclocal.m4 | config.h.in | Makefile.in | build-aux/* | m4/*) continue ;;
	esac
	echo "$f"
done | sort >"$tmp/shipped"

missing=$(comm -23 "$tmp/tracked" "$tmp/shipped")
stray=$(comm -13 "$tmp/tracked" "$tmp/shipped")
[ -z "$missing" ] && [ -z "$stray" ] && exit 0
if [ -n "$missing" ]; then
	echo "tracked by git but not in the tarball (list them in EXTRA_DIST or a dist_ variable of their folder's module.am):"
	echo "$missing" | sed 's/^/   /'
fi
if [ -n "$stray" ]; then
	echo "in the tarball but not tracked by git (build outputs or local files; EXTRA_DIST should name files, not folders):"
	echo "$stray" | sed 's/^/   /'
fi
exit 1

#!/bin/sh
# docs/parameters.md is committed so it can be read without building; this
# test fails when the parameter table changed and the copy was not refreshed
# (fix: make update-docs in the build dir, which copies
# docs/parameters.md.gen to the source tree's docs/parameters.md).
generated=${GENERATED:-docs/parameters.md.gen}
srcdir=${srcdir:-.}
if ! diff -u "$srcdir/docs/parameters.md" "$generated" >/dev/null; then
	echo "docs/parameters.md is out of date with the parameter table (fix: make update-docs in the build dir):"
	diff -u "$srcdir/docs/parameters.md" "$generated" | head -20
	exit 1
fi
echo "docs/parameters.md matches the parameter table"

#!/bin/sh
# docs/parameters.md is committed so it can be read without building; this
# test fails when the parameter table changed and the copy was not refreshed
# (fix: make docs/parameters.md && cp it over the source tree's copy).
gendoc=${GENDOC:-src/vma/config/cfg_gendoc}
srcdir=${srcdir:-.}
if ! "$gendoc" | diff -u "$srcdir/docs/parameters.md" - >/dev/null; then
	echo "docs/parameters.md is out of date with the parameter table:"
	"$gendoc" | diff -u "$srcdir/docs/parameters.md" - | head -20
	exit 1
fi
echo "docs/parameters.md matches the parameter table"

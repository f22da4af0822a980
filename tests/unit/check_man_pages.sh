#!/bin/bash
# The man pages (docs/*.[578]) are written by hand but checked against the
# code they describe, so they cannot drift (make check, from the build dir):
#   libvma.7      the parameter list between its GENERATED markers is what
#                 `cfg_gendoc --man` prints from the parameter table now;
#   every page    each VMA_* name it mentions is a parameter of the table;
#   vma_stats.8   its OPTIONS are exactly the options of `vma_stats --help`;
#   vmad.8        its OPTIONS are exactly the options of `vmad --help`
#                 (when vmad is built);
#   libvma.conf.5 its Roles are exactly the roles the parser knows, each
#                 parses in a rule, and every EXAMPLES block (and the
#                 installed libvma.conf) parses with no bad line;
#   every page    groff renders it with no warning (when groff is there).
# Fix a stale libvma.7 with `make update-docs` in the build dir (which also
# refreshes docs/parameters.md), or `tests/unit/check_man_pages.sh --update`
# run from a build dir; both rewrite the source tree's docs/libvma.7.
set -u
srcdir=${srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
gendoc=./src/vma/config/cfg_gendoc
vma_stats=./tools/vma_stats/vma_stats
vmad=./tools/vmad/vmad
page7=$srcdir/docs/libvma.7
# The markers, matched as fixed text at the start of a line.
export MAN_BEGIN='.\" BEGIN GENERATED' MAN_END='.\" END GENERATED'

[ -x "$gendoc" ] || { echo "check_man_pages: $gendoc not built (run from the build dir)"; exit 99; }
tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# splice_generated PAGE GENERATED: PAGE with its generated block replaced.
splice_generated() {
	GEN=$2 awk '
		index($0, ENVIRON["MAN_BEGIN"]) == 1 { print; while ((getline line < ENVIRON["GEN"]) > 0) print line; skip = 1; next }
		index($0, ENVIRON["MAN_END"]) == 1 { skip = 0 }
		!skip { print }' "$1"
}

"$gendoc" --man >"$tmp/params.man" || { echo "check_man_pages: cfg_gendoc --man failed"; exit 1; }
if [ "${1:-}" = --update ]; then
	splice_generated "$page7" "$tmp/params.man" >"$tmp/libvma.7" && cp "$tmp/libvma.7" "$page7" &&
		echo "updated $page7"
	exit
fi

failed=0
ok() { echo "ok: $*"; }
bad() { echo "FAIL: $*"; failed=1; }

# 1. libvma(7)'s parameter list.
if [ "$(grep -cF -e "$MAN_BEGIN" -e "$MAN_END" "$page7")" != 2 ]; then
	bad "libvma.7 lacks its BEGIN/END GENERATED markers"
elif splice_generated "$page7" "$tmp/params.man" | diff -u "$page7" - >"$tmp/diff"; then
	ok "libvma.7 lists the $("$gendoc" --effects | wc -l) parameters of the table"
else
	bad "libvma.7's parameter list is out of date with the table (fix: make update-docs in the build dir):"
	head -20 "$tmp/diff"
fi

# 2. VMA_* names in every page are parameters.
"$gendoc" --effects | awk '{print $1}' | sort >"$tmp/params"
for page in "$srcdir"/docs/*.[578]; do
	unknown=$(grep -vE '^\.(\\"|TH)' "$page" | grep -oE 'VMA_[A-Z0-9_]*[A-Z0-9]' | sort -u |
		grep -vxE 'VMA_DEFAULT_APPLICATION_ID|VMA_VERSION' | comm -23 - "$tmp/params")
	if [ -z "$unknown" ]; then
		ok "$(basename "$page"): every VMA_* name it mentions is a parameter"
	else
		bad "$(basename "$page") names VMA_* variables the table lacks:" $unknown
	fi
done

# man_options PAGE: "-s --long" per option of the OPTIONS section (a .TP
# tag line holding \fB\-s\fR and/or \fB\-\-long\fR), sorted.
man_options() {
	awk '/^\.SH OPTIONS/ { on = 1; next } /^\.SH / { on = 0 }
		on && tag { print; tag = 0 } on && /^\.TP/ { tag = 1 }' "$1" |
		sed -E 's/\\f[BIR]//g; s/\\-/-/g' |
		sed -nE 's/^(-([A-Za-z]))?(, )?(--([a-z_]+))?.*/\2 \5/p' | sed 's/^ //' | sort
}
# help_options PROGRAM: the same from PROGRAM --help.
help_options() {
	"$1" --help 2>&1 | sed -nE 's/^ +(-([A-Za-z]), )?--([a-z_]+).*/\2 \3/p' | sed 's/^ //' | sort
}
compare_options() {
	local name=$1 page=$2 prog=$3
	man_options "$page" | sed -E 's/^([A-Za-z]) /-\1 /; s/ ([a-z_]+)$/ --\1/; s/^([a-z_]+)$/--\1/' >"$tmp/$name.man"
	help_options "$prog" | sed -E 's/^([A-Za-z]) /-\1 /; s/ ([a-z_]+)$/ --\1/; s/^([a-z_]+)$/--\1/' >"$tmp/$name.help"
	if [ ! -s "$tmp/$name.help" ]; then
		bad "$name --help lists no options"
	elif diff "$tmp/$name.help" "$tmp/$name.man" >"$tmp/$name.diff"; then
		ok "$(basename "$page") documents the $(wc -l <"$tmp/$name.help") options of $name --help"
	else
		bad "$(basename "$page") and $name --help differ (< --help only, > man page only):"
		grep '^[<>]' "$tmp/$name.diff"
	fi
}

# 3. vma_stats(8) and vmad(8) against the programs.
if [ -x "$vma_stats" ]; then
	compare_options vma_stats "$srcdir/docs/vma_stats.8" "$vma_stats"
else
	bad "$vma_stats not built"
fi
if [ -x "$vmad" ]; then
	compare_options vmad "$srcdir/docs/vmad.8" "$vmad"
else
	echo "skip: vmad not built here (no xdp backend): vmad.8 options not compared"
fi

# 4. libvma.conf(5) against the parser.
conf5=$srcdir/docs/libvma.conf.5
awk '/^\.SS Roles/ { on = 1; next } /^\.S[SH] / { on = 0 } on && tag { print; tag = 0 }
	on && /^\.TP/ { tag = 1 }' "$conf5" | sed -nE 's/^\.B ([a-z_]+)$/\1/p' | sort >"$tmp/roles.man"
"$gendoc" --conf-roles | sort >"$tmp/roles.parser"
if diff "$tmp/roles.parser" "$tmp/roles.man" >"$tmp/roles.diff"; then
	ok "libvma.conf.5 lists the $(wc -l <"$tmp/roles.parser") roles of the parser"
else
	bad "libvma.conf.5's Roles and the parser's differ (< parser only, > man page only):"
	grep '^[<>]' "$tmp/roles.diff"
fi
while read -r role; do
	printf 'use os %s *:*\nuse vma %s 10.0.0.0/8:1-2\n' "$role" "$role"
done <"$tmp/roles.man" >"$tmp/roles.conf"
"$gendoc" --conf-check "$tmp/roles.conf" >"$tmp/roles.out" 2>&1 &&
	ok "every documented role parses with both transports" ||
	{ bad "a documented role or transport does not parse:"; cat "$tmp/roles.out"; }
# Examples: the text between .EX and .EE with troff escapes undone.
awk -v dir="$tmp" '/^\.EX/ { n++; on = 1; next } /^\.EE/ { on = 0 }
	on && !/^\./ { print > (dir "/example" n ".conf") }' "$conf5"
n=0 ex_bad=0
for ex in "$tmp"/example*.conf; do
	[ -e "$ex" ] || continue
	n=$((n + 1))
	sed -i 's/\\-/-/g; s/\\e/\\/g' "$ex"
	"$gendoc" --conf-check "$ex" >"$tmp/ex.out" 2>&1 ||
		{ bad "libvma.conf.5 example $n does not parse cleanly:"; cat "$ex" "$tmp/ex.out"; ex_bad=1; }
done
[ $n -eq 0 ] && bad "libvma.conf.5 has no example"
[ $n -gt 0 ] && [ $ex_bad = 0 ] && ok "libvma.conf.5: its $n examples parse with no bad line"
"$gendoc" --conf-check "$srcdir/libvma.conf" >"$tmp/conf.out" 2>&1 &&
	ok "the installed libvma.conf parses with no bad line ($(cat "$tmp/conf.out"))" ||
	{ bad "libvma.conf does not parse cleanly:"; cat "$tmp/conf.out"; }

# 5. groff renders every page without a warning.
if command -v groff >/dev/null; then
	for page in "$srcdir"/docs/*.[578]; do
		warnings=$(LC_ALL=C.UTF-8 groff -man -Tutf8 -ww -z "$page" 2>&1)
		[ -z "$warnings" ] && ok "$(basename "$page") renders without groff warnings" ||
			bad "groff warns about $(basename "$page"): $warnings"
	done
else
	echo "skip: groff not installed: pages not rendered"
fi

exit $failed

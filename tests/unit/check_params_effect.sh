#!/bin/sh
# Every VMA_* parameter either does what docs/parameters.md says or is
# marked as doing nothing here. For each row of the parameter table
# (listed by cfg_gendoc --effects) this fails when:
# - the row is unmarked (in effect) or marked CFG_VERBS_USED (read by the
#   verbs backend) but no code outside src/vma/config/ reads g_cfg.<field>
#   (in src/ and tools/, comments ignored): implement it or mark it
#   CFG_VERBS_ONLY / CFG_NO_EFFECT("why") in cfg_params.def;
# - the row is marked CFG_VERBS_ONLY or CFG_NO_EFFECT but some code reads it:
#   the mark went stale, drop it;
# - the row is marked CFG_VIA_LOADER but the loader (src/vma/config/*.c)
#   never touches the field.
srcdir=${srcdir:-.}
gendoc=${CFG_GENDOC:-src/vma/config/cfg_gendoc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! "$gendoc" --effects >"$tmp/rows" || ! [ -s "$tmp/rows" ]; then
	echo "cannot list the parameter table with $gendoc --effects"
	exit 1
fi

# Source with comments removed, one "file:line" per line, so a comment that
# names g_cfg.x does not count as reading it. (A "//" inside a string cuts the
# rest of that line: at worst a read is missed and this check fails loudly.)
strip_comments() {
	awk '{
		line = $0; out = "";
		while (length(line)) {
			if (incomment) {
				i = index(line, "*/");
				if (!i) { line = ""; break }
				line = substr(line, i + 2); incomment = 0; continue
			}
			i = index(line, "/*"); j = index(line, "//");
			if (j && (!i || j < i)) { out = out substr(line, 1, j - 1); break }
			if (i) { out = out substr(line, 1, i - 1); line = substr(line, i + 2); incomment = 1; continue }
			out = out line; line = ""
		}
		print FILENAME ": " out
	}' "$@"
}

find "$srcdir/src" "$srcdir/tools" -name '*.[ch]' ! -path '*/src/vma/config/*' | sort >"$tmp/files"
find "$srcdir/src/vma/config" -name '*.c' | sort >"$tmp/loader_files"
if ! [ -s "$tmp/files" ] || ! [ -s "$tmp/loader_files" ]; then
	echo "no sources under $srcdir/src"
	exit 1
fi
# shellcheck disable=SC2046
strip_comments $(cat "$tmp/files") >"$tmp/code"
# shellcheck disable=SC2046
strip_comments $(cat "$tmp/loader_files") >"$tmp/loader"

bad=0 rows=0 used=0 marked=0
while read -r name field effect; do
	rows=$((rows + 1))
	readers=$(grep -E "g_cfg\.$field([^a-z0-9_]|\$)" "$tmp/code" | sed "s|^$srcdir/||; s|: .*||" | sort -u | tr '\n' ' ')
	case $effect in
	used | verbs)
		used=$((used + 1))
		if [ -z "$readers" ]; then
			echo "FAIL $name: no code outside src/vma/config/ reads g_cfg.$field, and the table does not mark it CFG_VERBS_ONLY or CFG_NO_EFFECT(why)"
			bad=$((bad + 1))
		fi
		;;
	verbs-only|none)
		marked=$((marked + 1))
		if [ -n "$readers" ]; then
			echo "FAIL $name: marked '$effect' in cfg_params.def, yet g_cfg.$field is read in $readers"
			bad=$((bad + 1))
		fi
		;;
	loader)
		used=$((used + 1))
		if ! grep -qE "(->|\.)$field([^a-z0-9_]|\$)" "$tmp/loader"; then
			echo "FAIL $name: marked CFG_VIA_LOADER, yet src/vma/config/*.c never uses .$field"
			bad=$((bad + 1))
		fi
		;;
	*)
		echo "FAIL $name: unknown effect '$effect'"
		bad=$((bad + 1))
		;;
	esac
done <"$tmp/rows"

if [ "$bad" -gt 0 ]; then
	echo "$bad of $rows parameters fail (fix the code or the mark in src/vma/config/cfg_params.def)"
	exit 1
fi
echo "all $rows parameters accounted for: $used in effect, $marked marked as doing nothing here"

#!/bin/sh
# The layers of docs/architecture.md ("Layers"), checked on the sources:
# every #include "MODULE/..." of a module of src/vma/ names a module of a
# lower layer, or one of its own layer the table allows ("may call in its
# own layer": "each other", or the modules named there). The table is read
# from the doc, so the doc and this check cannot drift apart. Fails naming
# the file, the include and the rule it breaks.
srcdir=${srcdir:-.}
doc=$srcdir/docs/architecture.md
src=$srcdir/src/vma

tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

# "layer module" and "module allowed-peer" lines from the table's rows:
# | 4 | `sock`, `iomux`, `extra` | what | each other: ... |
# | 3 | `ring`, `vmad`, `stack` | what | `ring` <-> `vmad`, `stack` -> `ring` |
awk -F'|' -v layers="$tmp/layers" -v peers="$tmp/peers" '
	/^\| [0-9]+ \| `/ {
		layer = $2; gsub(/ /, "", layer)
		n = split($3, m, ","); k = 0
		for (i = 1; i <= n; i++) {
			name = m[i]; gsub(/[ `]/, "", name)
			if (name == "") continue
			mods[++k] = name
			print layer, name > layers
		}
		own = $5
		if (own ~ /each other/) {
			for (i = 1; i <= k; i++)
				for (j = 1; j <= k; j++)
					if (i != j) print mods[i], mods[j] > peers
		}
		while (match(own, /`[a-z_]+` (<->|->) `[a-z_]+`/)) {
			rule = substr(own, RSTART, RLENGTH); own = substr(own, RSTART + RLENGTH)
			gsub(/`/, "", rule); split(rule, r, " ")
			print r[1], r[3] > peers
			if (r[2] == "<->") print r[3], r[1] > peers
		}
	}' "$doc"
touch "$tmp/peers"
if [ "$(wc -l <"$tmp/layers" 2>/dev/null || echo 0)" -lt 8 ]; then
	echo "FAIL $doc: no layer table found (rows '| N | \`module\`, ... |' under \"Layers\")"
	exit 1
fi

layer_of() {
	awk -v m="$1" '$2 == m { print $1 }' "$tmp/layers"
}

bad=0
modules=0
for dir in "$src"/*/ "$src"/vma_main.c; do
	mod=$(basename "$dir" .c)
	[ "$mod" = "bpf" ] && continue
	case $dir in
	*/) files=$(find "$dir" -name '*.[ch]') ;;
	*) files=$dir ;;
	esac
	[ -n "$files" ] || continue
	own=$(layer_of "$mod")
	if [ -z "$own" ]; then
		echo "FAIL src/vma/$mod: in no layer of $doc (add it to the table)"
		bad=$((bad + 1))
		continue
	fi
	modules=$((modules + 1))
	for f in $files; do
		grep -o '^#include "[a-z_]*/' "$f" | sed 's/#include "//; s/\///' | sort -u | while read -r inc; do
			[ "$inc" = "$mod" ] && continue
			[ "$inc" = "mellanox" ] && continue   # the public Extra API header (include/)
			l=$(layer_of "$inc")
			if [ -z "$l" ]; then
				echo "FAIL ${f#"$srcdir"/}: includes $inc/, a module in no layer"
			elif [ "$l" -gt "$own" ]; then
				echo "FAIL ${f#"$srcdir"/}: $mod (layer $own) includes $inc/ (layer $l): calls go down only"
			elif [ "$l" -eq "$own" ] && ! grep -qx "$mod $inc" "$tmp/peers"; then
				echo "FAIL ${f#"$srcdir"/}: $mod includes $inc/ of its own layer $own, which the table does not allow"
			fi
		done >>"$tmp/fails"
	done
done
if [ -s "$tmp/fails" ]; then
	cat "$tmp/fails"
	echo "Fix: call down (a callback or function table the higher layer registers reaches up), or, if the" \
		"design changed, the layer table of docs/architecture.md."
	exit 1
fi
if [ "$bad" -gt 0 ]; then
	exit 1
fi
echo "$modules modules of src/vma follow the $(cut -d' ' -f1 "$tmp/layers" | sort -u | wc -l) layers of docs/architecture.md"

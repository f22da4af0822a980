#!/bin/bash
# Local trust (docs/security.md): what another local user can leave where
# libvma writes or reads, and what a privileged program takes from its
# environment. Every refused file gives one warning naming the parameter and
# the file, the planted target is untouched, and the program still works (a
# loopback TCP exchange through dlopen_sock). No testbed; root, to make
# files of another user and a set-group-ID program.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root (files of another user, a set-group-ID program)"
sock=$(need_helper dlopen_sock) || exit 1
vma_stats=$BUILDDIR/tools/vma_stats/vma_stats
[ -x "$vma_stats" ] || fail "vma_stats not built in $BUILDDIR"
other=65534 # nobody / nogroup

# expect_in FILE TEXT...: every TEXT occurs in FILE (fixed strings).
expect_in() {
	local f=$1 t
	shift
	for t in "$@"; do
		grep -qF -- "$t" "$f" || { cat "$f"; fail "stderr lacks '$t'"; }
	done
}
# expect_count FILE TEXT N
expect_count() {
	local n
	n=$(grep -cF -- "$2" "$1")
	[ "$n" = "$3" ] || { cat "$1"; fail "'$2' appears $n times, not $3"; }
}
# expect_content FILE TEXT: FILE holds exactly TEXT (and a newline).
expect_content() {
	[ "$(cat "$1")" = "$2" ] || fail "$1 was changed: '$(head -c 200 "$1")'"
}
# run_sock NAME [VAR=VALUE...]: dlopen_sock with the variables set, output
# in $TMP/NAME.err; it must exit 0 (its TCP exchange worked).
run_sock() {
	local name=$1
	shift
	env "$@" timeout -k 5 60 "$sock" "$LIBVMA" >"$TMP/$name.out" 2>"$TMP/$name.err" ||
		{ rc=$?; cat "$TMP/$name.err"; fail "$name: dlopen_sock exited $rc"; }
}

# A shared, sticky directory like /tmp that other users can write.
shared=$TMP/shared
mkdir -m 1777 "$shared"

# --- the statistics file: planted under the pid the program will have ----
# plant_and_run NAME HOW: a shell creates $shared/vmastat.<its pid> as HOW
# says, then becomes dlopen_sock (exec keeps the pid).
plant_and_run() {
	local name=$1 how=$2
	# shellcheck disable=SC2016 # the script expands its own arguments
	timeout -k 5 60 bash -c '
		f=$1/vmastat.$$
		echo "$f" >"$2/$3.path"
		case $4 in
		other) echo planted >"$f"; chown "$7:$7" "$f"; chmod 666 "$f" ;;
		symlink) ln -s "$2/precious" "$f" ;;
		fifo) mkfifo -m 666 "$f"; chown "$7" "$f" ;;
		stale) echo stale >"$f"; chmod 644 "$f" ;;
		esac
		exec env VMA_STATS_SHMEM_DIR="$1" "$5" "$6"' \
		_ "$shared" "$TMP" "$name" "$how" "$sock" "$LIBVMA" "$other" \
		>"$TMP/$name.out" 2>"$TMP/$name.err" ||
		{ rc=$?; cat "$TMP/$name.err"; fail "$name: dlopen_sock exited $rc"; }
	planted=$(cat "$TMP/$name.path")
}

plant_and_run stats_other other
expect_in "$TMP/stats_other.err" \
	"VMA_STATS_SHMEM_DIR: refusing the statistics file $planted: it belongs to another user (uid $other)"
expect_count "$TMP/stats_other.err" "refusing the statistics file" 1
expect_content "$planted" planted
[ "$(stat -c %u:%a "$planted")" = "$other:666" ] || fail "$planted changed owner or mode"
rm -f "$planted"
log "ok: another user's statistics file (0666) refused, left as it was"

echo precious >"$TMP/precious"
plant_and_run stats_link symlink
expect_in "$TMP/stats_link.err" "refusing the statistics file $planted: it is a symbolic link"
expect_count "$TMP/stats_link.err" "refusing the statistics file" 1
expect_content "$TMP/precious" precious
[ -L "$planted" ] || fail "the planted symbolic link was removed"
rm -f "$planted"
log "ok: a symbolic link as the statistics file refused, its target untouched"

plant_and_run stats_fifo fifo
expect_in "$TMP/stats_fifo.err" "refusing the statistics file $planted: it is not a regular file"
rm -f "$planted"
log "ok: a FIFO as the statistics file refused"

plant_and_run stats_stale stale
grep -F "statistics file" "$TMP/stats_stale.err" && fail "a stale file of ours gave a warning"
[ -e "$planted" ] && fail "$planted left behind at exit"
log "ok: a stale statistics file of our own replaced silently, removed at exit"

# --- VMA_STATS_FILE and VMA_LOG_FILE -----------------------------------------
ln -s "$TMP/precious" "$shared/records"
run_sock records_link VMA_STATS_FILE="$shared/records"
expect_in "$TMP/records_link.err" \
	"VMA_STATS_FILE=$shared/records refused: it is a symbolic link; socket records are not written"
expect_content "$TMP/precious" precious
log "ok: VMA_STATS_FILE as a symbolic link refused"

echo theirs >"$shared/theirs"
chown $other:$other "$shared/theirs"
chmod 666 "$shared/theirs"
run_sock records_other VMA_STATS_FILE="$shared/theirs"
expect_in "$TMP/records_other.err" \
	"VMA_STATS_FILE=$shared/theirs refused: it belongs to another user (uid $other)"
expect_content "$shared/theirs" theirs
log "ok: VMA_STATS_FILE of another user refused"

ln -s "$TMP/precious" "$shared/vma.log"
run_sock log_link VMA_LOG_FILE="$shared/vma.log"
expect_in "$TMP/log_link.err" \
	"Refusing log file '$shared/vma.log' (VMA_LOG_FILE=$shared/vma.log): it is a symbolic link; logging to stderr" \
	"VMA INFO"
expect_count "$TMP/log_link.err" "Refusing log file" 1
expect_content "$TMP/precious" precious
log "ok: VMA_LOG_FILE as a symbolic link refused, the log on stderr"

run_sock log_other VMA_LOG_FILE="$shared/theirs"
expect_in "$TMP/log_other.err" "Refusing log file '$shared/theirs'" "it belongs to another user (uid $other)"
expect_content "$shared/theirs" theirs
log "ok: VMA_LOG_FILE of another user refused"

(umask 000 && run_sock log_new VMA_LOG_FILE="$TMP/new.log")
[ "$(stat -c %a "$TMP/new.log")" = 600 ] || fail "new log file has mode $(stat -c %a "$TMP/new.log")"
grep -qF "VMA INFO" "$TMP/new.log" || fail "the log file holds no banner"
log "ok: a new log file is created 0600 whatever the umask"

# --- libvma.conf that is not one --------------------------------------------
cat >"$TMP/shadow" <<'EOF'
root:$6$S3CRETsalt$S3CREThashhashhash:19000:0:99999:7:::
daemon:*:19000:0:99999:7:::
alice:$y$j9T$S3CRETalice$S3CRETalicehash:19001:0:99999:7:::
bob:$6$S3CRETbob$hash:19001:0:99999:7:::
carol:$6$S3CRETcarol$hash:19002:0:99999:7:::
dave:$6$S3CRETdave$hash:19003:0:99999:7:::
EOF
run_sock conf_secret VMA_CONFIG_FILE="$TMP/shadow" VMA_TRACELEVEL=debug
# shellcheck disable=SC2016 # a literal $6$
grep -E 'S3CRET|root:|alice|\$6\$' "$TMP/conf_secret.err" &&
	fail "the content of a file given as VMA_CONFIG_FILE was printed"
expect_in "$TMP/conf_secret.err" "$TMP/shadow:1: unknown statement" "$TMP/shadow:5: " \
	"$TMP/shadow: 5 bad lines, reading stopped"
grep -qF "$TMP/shadow:6:" "$TMP/conf_secret.err" && fail "line 6 read after the stop"
expect_count "$TMP/conf_secret.err" "reading stopped" 1
log "ok: a libvma.conf that is not one: line numbers and reasons only, stopped after 5"

mkfifo "$TMP/conf_fifo"
run_sock conf_fifo VMA_CONFIG_FILE="$TMP/conf_fifo"
expect_in "$TMP/conf_fifo.err" "VMA_CONFIG_FILE: $TMP/conf_fifo is not a regular file"
log "ok: a FIFO as VMA_CONFIG_FILE refused without blocking the start"

# --- a privileged program: VMA_* ignored ------------------------------------
if findmnt -no OPTIONS -T "$TMP" | grep -qw nosuid; then
	log "note: $TMP is mounted nosuid, set-group-ID case left out"
else
	cp "$sock" "$TMP/secure_sock"
	chgrp $other "$TMP/secure_sock"
	chmod 2755 "$TMP/secure_sock"
	mkdir "$TMP/secure_stats"
	# root running a set-group-ID program: egid != gid, so AT_SECURE.
	# A clean environment, so that exactly 4 VMA_* variables are set
	# (sanitizer options pass through for ASan builds).
	env -i PATH="$PATH" ${ASAN_OPTIONS:+ASAN_OPTIONS="$ASAN_OPTIONS"} \
		${UBSAN_OPTIONS:+UBSAN_OPTIONS="$UBSAN_OPTIONS"} \
		VMA_LOG_FILE="$TMP/secure.log" VMA_STATS_SHMEM_DIR="$TMP/secure_stats" \
		VMA_CONFIG_FILE="$TMP/shadow" VMA_TRACELEVEL=none \
		timeout -k 5 60 "$TMP/secure_sock" "$LIBVMA" >"$TMP/secure.out" 2>"$TMP/secure.err" ||
		{ rc=$?; cat "$TMP/secure.err"; fail "set-group-ID dlopen_sock exited $rc"; }
	expect_in "$TMP/secure.err" "this program runs with raised privileges" \
		"its 4 VMA_* environment variables are ignored" "VMA INFO"
	expect_count "$TMP/secure.err" "raised privileges" 1
	[ -e "$TMP/secure.log" ] && fail "VMA_LOG_FILE was used by a set-group-ID program"
	[ -z "$(ls -A "$TMP/secure_stats")" ] || fail "VMA_STATS_SHMEM_DIR was used by a set-group-ID program"
	grep -qF "$TMP/shadow" "$TMP/secure.err" && fail "VMA_CONFIG_FILE was read by a set-group-ID program"
	log "ok: a set-group-ID program ignores VMA_* with one warning"
fi

# --- vma_stats on blocks it did not get from libvma --------------------------
blocks=$TMP/blocks
mkdir "$blocks"
start_bg sleep 60
victim=$LAST_PID
# vstats NAME ARGS...: vma_stats must end by itself, without a crash.
vstats() {
	local name=$1 rc
	shift
	timeout -k 5 20 "$vma_stats" -k "$blocks" "$@" >"$TMP/$name.vout" 2>"$TMP/$name.verr"
	rc=$?
	[ $rc = 124 ] || [ $rc = 137 ] && fail "vma_stats $name: hung"
	[ $rc -ge 128 ] && { cat "$TMP/$name.verr"; fail "vma_stats $name: died of signal $((rc - 128))"; }
	return $rc
}
head -c 300000 /dev/urandom >"$blocks/vmastat.$victim"
chmod 600 "$blocks/vmastat.$victim"
vstats random -p "$victim" -c 1 && fail "vma_stats accepted random bytes"
expect_in "$TMP/random.verr" "not a VMA statistics file"
# A real block (from stats_fake_app), then its counts and offsets set out of
# range; the pid field says $victim so that only the layout checks stand.
fake=$(need_helper stats_fake_app) || exit 1
mkdir "$TMP/real"
start_bg "$fake" "$TMP/real" 3 10 100 >"$TMP/fake.out"
fake_pid=$LAST_PID
for _ in $(seq 50); do [ -s "$TMP/real/vmastat.$fake_pid" ] && break; sleep 0.1; done
sleep 0.2
cp "$TMP/real/vmastat.$fake_pid" "$TMP/real.block" || fail "stats_fake_app made no block"
kill "$fake_pid"
# put_le FILE OFFSET NBYTES VALUE: little-endian integer into FILE.
put_le() {
	local out='' i
	for ((i = 0; i < $3; i++)); do
		out+=$(printf '\\x%02x' $((($4 >> (8 * i)) & 255)))
	done
	printf '%b' "$out" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
# header fields (src/vma/stats/stats_layout.h)
OFF_TOTAL=16 OFF_PID=24 OFF_SOCKET_SLOTS=32 OFF_MC_SLOTS=48 OFF_SOCKET_OFF=80 OFF_MC_OFF=128
n=0
for edit in "$OFF_SOCKET_SLOTS 4 0xffffffff" "$OFF_SOCKET_SLOTS 4 1024" "$OFF_MC_SLOTS 4 0x7fffffff" \
	"$OFF_SOCKET_OFF 8 0x7fffffffffffffff" "$OFF_SOCKET_OFF 8 3" "$OFF_MC_OFF 8 -8" \
	"$OFF_TOTAL 8 -1" "$OFF_TOTAL 8 8"; do
	n=$((n + 1))
	cp "$TMP/real.block" "$blocks/vmastat.$victim"
	put_le "$blocks/vmastat.$victim" $OFF_PID 4 "$victim"
	# shellcheck disable=SC2086 # edit is "offset size value"
	put_le "$blocks/vmastat.$victim" $edit
	for view in 1 3 4; do
		vstats "corrupt$n" -p "$victim" -c 1 -v $view &&
			{ cat "$TMP/corrupt$n.vout"; fail "vma_stats accepted a block with $edit (-v $view)"; }
	done
	# -v 5 lists every process, says why it skips this one, exits 0
	vstats "corrupt${n}_netstat" -v 5 || fail "vma_stats -v 5 failed"
	expect_in "$TMP/corrupt${n}_netstat.verr" "vmastat: pid $victim: "
done
# the unmodified copy, named after $victim, loads and shows the sockets
cp "$TMP/real.block" "$blocks/vmastat.$victim"
put_le "$blocks/vmastat.$victim" $OFF_PID 4 "$victim"
vstats sane -p "$victim" -c 1 || { cat "$TMP/sane.verr"; fail "vma_stats refused a sane block"; }
expect_in "$TMP/sane.vout" "Fd=[100]"
# and the same block world-writable, as planted by anyone, is refused
chmod 666 "$blocks/vmastat.$victim"
vstats planted -p "$victim" -c 1 && fail "vma_stats accepted a world-writable block"
expect_in "$TMP/planted.verr" "writable by other users"
rm -f "$blocks/vmastat.$victim"
mkfifo "$blocks/vmastat.$victim"
vstats fifo -p "$victim" -c 1 && fail "vma_stats accepted a FIFO"
expect_in "$TMP/fifo.verr" "not a regular file"
vstats fifo_z -p "$victim" -z && fail "vma_stats -z wrote into a FIFO"
vstats fifo_find -c 1
vstats fifo_netstat -v 5
log "ok: vma_stats refuses random, corrupt and FIFO blocks without hanging or crashing"

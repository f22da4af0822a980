#!/bin/bash
# c. redis-server preloaded on a free port; redis-benchmark (preloaded) runs
# SET and GET; a binary value written and read back with redis-cli
# (preloaded) must come back byte for byte.
. "$(dirname "$0")/lib.sh"
need redis-server redis-cli redis-benchmark

port=$(free_port)
start_bg preload redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
	--daemonize no --dir "$TMP" --logfile "$TMP/redis.log"
wait_listen "$port" 15

cli() { preload redis-cli -h 127.0.0.1 -p "$port" "$@"; }

[ "$(cli PING)" = PONG ] || fail "PING did not answer PONG"

# 64 KiB of random bytes, including NULs and newlines.
head -c 65536 /dev/urandom >"$TMP/value"
[ "$(cli -x SET vma:binary <"$TMP/value")" = OK ] || fail "SET of the binary value"
cli --raw GET vma:binary >"$TMP/got"
# --raw prints the value followed by one newline.
head -c 65536 "$TMP/got" >"$TMP/got.value"
cmp "$TMP/value" "$TMP/got.value" || fail "GET returned different bytes"
[ "$(stat -c %s "$TMP/got")" -eq 65537 ] || fail "GET returned $(stat -c %s "$TMP/got") bytes, want 65536+newline"
[ "$(cli STRLEN vma:binary)" = 65536 ] || fail "STRLEN is not 65536"
[ "$(cli GET vma:text)" = "" ] || fail "missing key not empty"
[ "$(cli SET vma:text 'hello, kernel bypass')" = OK ] || fail "SET text"
[ "$(cli GET vma:text)" = 'hello, kernel bypass' ] || fail "GET text"
log "ok: redis-cli values round-trip"

preload redis-benchmark -h 127.0.0.1 -p "$port" -n 20000 -q -t set,get >"$TMP/bench" 2>"$TMP/bench.err" ||
	{ cat "$TMP/bench" "$TMP/bench.err"; fail "redis-benchmark failed"; }
tr '\r' '\n' <"$TMP/bench" | grep 'requests per second' | tee "$TMP/bench.lines"
for op in SET GET; do
	rps=$(awk -v op="$op:" '$1 == op { print int($2) }' "$TMP/bench.lines")
	[ -n "$rps" ] && [ "$rps" -gt 0 ] || fail "no $op result from redis-benchmark"
done
[ "$(cli DBSIZE)" -ge 3 ] || fail "DBSIZE after the benchmark"
cli SHUTDOWN NOSAVE >/dev/null 2>&1
log "ok: redis-benchmark SET and GET"

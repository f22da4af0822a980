#!/bin/bash
# b. iperf3 over loopback, TCP and UDP, server and client preloaded. Each run
# is also done without the library; the received byte counts must be > 0
# and within a factor of 10 of each other (no timing asserts beyond that).
. "$(dirname "$0")/lib.sh"
need iperf3 python3

SECONDS_PER_RUN=${IPERF_SECONDS:-3}

# received_bytes JSON: what the receiving side counted.
received_bytes() {
	python3 - "$1" <<'PY'
import json, sys
with open(sys.argv[1]) as f:
    doc = json.load(f)
if "error" in doc:
    sys.exit("iperf3 error: " + doc["error"])
end = doc["end"]
print(int(end["sum_received"]["bytes"]))
if "lost_percent" in end.get("sum", {}):
    lost = end["sum"]["lost_percent"]
    if lost > 50:
        sys.exit("lost %.1f%% of datagrams" % lost)
PY
}

# run_iperf WRAPPER PROTO: prints the bytes the server received.
run_iperf() {
	local wrapper=$1 proto=$2 port tag=$1-$2
	local -a extra=()
	[ "$proto" = udp ] && extra=(-u -b 200M)
	port=$(free_port)
	start_bg $wrapper iperf3 -s -1 -p "$port" --json >"$TMP/server-$tag.json" 2>"$TMP/server-$tag.err"
	local server_pid=$LAST_PID
	# We run in a command substitution, where lib.sh's cleanup does not reach.
	trap 'kill $server_pid 2>/dev/null' EXIT
	wait_listen "$port" >&2
	$wrapper iperf3 -c 127.0.0.1 -p "$port" -t "$SECONDS_PER_RUN" "${extra[@]}" --json \
		>"$TMP/client-$tag.json" 2>"$TMP/client-$tag.err" ||
		{ cat "$TMP/client-$tag.json" "$TMP/client-$tag.err" >&2; fail "iperf3 client ($tag) failed" >&2; }
	wait "$server_pid" || { cat "$TMP/server-$tag.err" >&2; fail "iperf3 server ($tag) failed" >&2; }
	received_bytes "$TMP/server-$tag.json" || fail "bad server report ($tag)" >&2
}

for proto in tcp udp; do
	kernel=$(run_iperf env "$proto") || exit 1
	vma=$(run_iperf preload "$proto") || exit 1
	log "$proto: received bytes without library $kernel, with library $vma"
	[ "$vma" -gt 0 ] || fail "$proto: nothing received with the library"
	ratio_ok "$kernel" "$vma" || fail "$proto: throughput differs by more than 10x"
done

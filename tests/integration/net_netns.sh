#!/bin/bash
# net/ against a real kernel: two throwaway network namespaces joined by a
# veth pair (198.19.0.0/24 only). net_probe runs in vmanet-a and its answers
# are checked here. Needs root; exits 77 (skipped) when namespaces cannot be
# made. Usage: net_netns.sh [BUILD_DIR]   (default: the current directory)
set -u

BUILD_DIR=${1:-.}
PROBE=$BUILD_DIR/tests/integration/net_probe
NS_A=vmanet-a
NS_B=vmanet-b
IF_A=vmanet-a0
IF_B=vmanet-b0

if [ ! -x "$PROBE" ]; then
	echo "net_netns: $PROBE not built (make check builds it)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "net_netns: SKIP (needs root for network namespaces)"
	exit 77
fi

TMP=$(mktemp -d /tmp/vmanet.XXXXXX)
cleanup() {
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	rm -rf "$TMP"
}
trap cleanup EXIT INT TERM
cleanup_stale() { ip netns del "$NS_A" 2>/dev/null; ip netns del "$NS_B" 2>/dev/null; }
cleanup_stale

if ! ip netns add "$NS_A" 2>/dev/null || ! ip netns add "$NS_B" 2>/dev/null; then
	echo "net_netns: SKIP (cannot create network namespaces here)"
	exit 77
fi
set -e
ip -n "$NS_A" link add "$IF_A" type veth peer name "$IF_B" netns "$NS_B"
ip -n "$NS_A" link set lo up
ip -n "$NS_B" link set lo up
ip -n "$NS_A" addr add 198.19.0.1/24 dev "$IF_A"
ip -n "$NS_B" addr add 198.19.0.2/24 dev "$IF_B"
ip -n "$NS_B" addr add 198.19.0.3/24 dev "$IF_B"
ip -n "$NS_B" addr add 198.19.0.4/24 dev "$IF_B"
ip -n "$NS_A" link set "$IF_A" up
ip -n "$NS_B" link set "$IF_B" up
# Routes are only looked up, nothing is sent along them.
ip -n "$NS_A" route add 198.19.0.128/26 via 198.19.0.2
ip -n "$NS_A" route add default via 198.19.0.2
ip -n "$NS_A" route add 224.0.0.0/4 dev "$IF_A"
# Unanswered ARP gives up after 3 x 100 ms instead of 3 s.
ip netns exec "$NS_A" sysctl -qw "net.ipv4.neigh.$IF_A.retrans_time_ms=100"
set +e

MAC_B=$(ip -n "$NS_B" -o link show "$IF_B" | sed -n 's/.*link\/ether \([0-9a-f:]*\).*/\1/p')
MTU_A=$(ip -n "$NS_A" -o link show "$IF_A" | sed -n 's/.* mtu \([0-9]*\).*/\1/p')

FAILS=0
PASSES=0
check() { # description, pattern (grep -E) expected in the probe output
	if grep -Eq -- "$2" "$TMP/out"; then
		PASSES=$((PASSES + 1))
	else
		FAILS=$((FAILS + 1))
		echo "FAIL: $1: no line matching '$2'"
	fi
}

# The neighbour table starts empty, so resolution is on demand.
ip -n "$NS_A" neigh flush dev "$IF_A"

ip netns exec "$NS_A" "$PROBE" \
	route 198.19.0.2 route 198.19.0.130 route 198.19.0.1 route 198.19.0.255 route 203.0.113.1 \
	mroute 239.1.1.1 none mroute 239.1.1.1 lo mroute 239.1.1.1 198.19.0.1 mroute 239.1.1.1 198.19.0.200 \
	trigger netlink neigh "$IF_A" 198.19.0.2 2000 trigger auto \
	neigh "$IF_A" 198.19.0.2 0 \
	trigger udp neigh "$IF_A" 198.19.0.3 2000 trigger auto \
	neigh "$IF_A" 198.19.0.99 300 \
	settings 3 10000 0 neigh "$IF_A" 198.19.0.98 5000 \
	settings 3 10000 2 neigh "$IF_A" 198.19.0.97 5000 \
	neigh "$IF_A" 239.1.2.3 0 neigh "$IF_A" 198.19.0.255 0 \
	ready "$TMP/ready" waitaddr 198.19.0.77 5000 route 198.19.0.77 \
	>"$TMP/out" 2>"$TMP/err" &
PROBE_PID=$!
for _ in $(seq 1 200); do
	[ -e "$TMP/ready" ] && break
	sleep 0.05
done
ip -n "$NS_A" addr add 198.19.0.77/32 dev "$IF_A"
wait "$PROBE_PID"
PROBE_RC=$?
cat "$TMP/out"
[ -s "$TMP/err" ] && sed 's/^/probe stderr: /' "$TMP/err"

[ "$PROBE_RC" = 0 ] || { FAILS=$((FAILS + 1)); echo "FAIL: probe exited $PROBE_RC"; }
check "on-link route" "^route 198.19.0.2 kind=unicast if=$IF_A gw=0.0.0.0 next_hop=198.19.0.2 src=198.19.0.1 mtu=$MTU_A\$"
check "longer prefix via gateway" "^route 198.19.0.130 kind=unicast if=$IF_A gw=198.19.0.2 next_hop=198.19.0.2 src=198.19.0.1 "
check "own address is local" "^route 198.19.0.1 kind=local "
check "subnet broadcast" "^route 198.19.0.255 kind=broadcast if=$IF_A gw=0.0.0.0 .* src=198.19.0.1 "
check "default route" "^route 203.0.113.1 kind=unicast if=$IF_A gw=198.19.0.2 "
check "multicast by table" "^mroute 239.1.1.1 kind=multicast if=$IF_A gw=0.0.0.0 next_hop=239.1.1.1 src=198.19.0.1 "
check "IP_MULTICAST_IF by index" "^mroute 239.1.1.1 kind=multicast if=lo .* src=127.0.0.1 "
check "IP_MULTICAST_IF by address" "^mroute 239.1.1.1 kind=multicast if=$IF_A .* src=198.19.0.1 "
check "IP_MULTICAST_IF unknown address" "^mroute 239.1.1.1 error=ENETUNREACH"
check "neighbour resolved on demand (netlink)" "^neigh 198.19.0.2 mac=$MAC_B "
check "neighbour now cached" "^neigh 198.19.0.2 mac=$MAC_B ms=([0-9]|1[0-9])\$"
check "neighbour resolved on demand (datagram)" "^neigh 198.19.0.3 mac=$MAC_B "
check "absent neighbour bounded by timeout" "^neigh 198.19.0.99 error=ETIMEDOUT ms=[2-5][0-9][0-9]\$"
check "failed neighbour, no retries" "^neigh 198.19.0.98 error=EHOSTUNREACH ms=[1-9][0-9]{2}\$"
check "failed neighbour, 2 retries (3 attempts)" "^neigh 198.19.0.97 error=EHOSTUNREACH ms=([89][0-9]{2}|1[0-9]{3})\$"
check "multicast MAC" "^neigh 239.1.2.3 mac=01:00:5e:01:02:03 ms=([0-9]|1[0-9])\$"
check "broadcast MAC" "^neigh 198.19.0.255 mac=ff:ff:ff:ff:ff:ff ms=([0-9]|1[0-9])\$"
check "address added after start seen through events" "^addr 198.19.0.77 appeared if=$IF_A events=yes\$"
check "new address routes as local" "^route 198.19.0.77 kind=local "

# Without privileges: NTF_USE is refused, the datagram fallback resolves.
if command -v setpriv >/dev/null; then
	ip netns exec "$NS_A" setpriv --reuid=65534 --regid=65534 --clear-groups \
		"$PROBE" neigh "$IF_A" 198.19.0.4 2000 >"$TMP/out" 2>>"$TMP/err"
	cat "$TMP/out"
	check "unprivileged neighbour resolution" "^neigh 198.19.0.4 mac=$MAC_B "
fi

# The kernel did the ARP: it holds the entries we asked for.
ip -n "$NS_A" neigh show dev "$IF_A" >"$TMP/neigh"
grep -Eq "^198.19.0.2 lladdr $MAC_B (REACHABLE|STALE|DELAY)" "$TMP/neigh" && PASSES=$((PASSES + 1)) ||
	{ FAILS=$((FAILS + 1)); echo "FAIL: kernel has no entry for 198.19.0.2:"; cat "$TMP/neigh"; }

echo "net_netns: $PASSES passed, $FAILS failed"
[ "$FAILS" = 0 ]

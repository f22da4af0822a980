#!/bin/bash
# Set up and run: installs what is missing, builds libvma, joins two network
# namespaces with a veth pair (contrib/testbed.sh up pair), and measures UDP
# ping-pong latency with sockperf between them, first on plain kernel
# sockets, then with LD_PRELOAD=libvma.so on both ends. Prints both side by
# side. The testbed is removed on exit, whatever happens.
#
#   sudo ./contrib/demo.sh          (root: namespaces and packages)
# Environment: DEMO_SECONDS (default 3), DEMO_MSG_SIZE (default 64).
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
seconds=${DEMO_SECONDS:-3}
msg_size=${DEMO_MSG_SIZE:-64}
port=11111
server_ip=198.18.0.2
ns_client=vmatb-a
ns_server=vmatb-b
work=$(mktemp -d /tmp/vma-demo.XXXXXX)

die() { echo "demo: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (network namespaces, packages): sudo $0"

# --- dependencies and build ------------------------------------------------
"$top/contrib/deps.sh" install || die "could not install the packages of contrib/deps.sh"

lib="$top/build/src/vma/.libs/libvma.so"
echo "demo: building libvma in build/ (log: build/demo-build.log)"
(
	[ -x "$top/configure" ] || ./autogen.sh
	mkdir -p build && cd build &&
		{ [ -f Makefile ] || ../configure; } &&
		make -j"${JOBS:-2}"
) >"$work/build.log" 2>&1
build_rc=$?
mkdir -p "$top/build" && cp "$work/build.log" "$top/build/demo-build.log"
[ $build_rc -eq 0 ] && [ -e "$lib" ] || { tail -30 "$work/build.log"; die "build failed"; }

# --- testbed ---------------------------------------------------------------
# The real one is contrib/testbed.sh; the fallback builds the same "pair"
# topology so the demo also runs in a tree that does not have it yet.
fallback_up() {
	fallback_down
	ip netns add $ns_client && ip netns add $ns_server &&
		ip link add vmatb-a0 type veth peer name vmatb-b0 &&
		ip link set vmatb-a0 netns $ns_client && ip link set vmatb-b0 netns $ns_server &&
		ip -n $ns_client addr add 198.18.0.1/24 dev vmatb-a0 &&
		ip -n $ns_server addr add 198.18.0.2/24 dev vmatb-b0 &&
		for n in $ns_client $ns_server; do
			ip -n $n link set lo up && ip -n $n link set "${n}0" up || return 1
		done
}
fallback_down() {
	ip netns del $ns_client 2>/dev/null
	ip netns del $ns_server 2>/dev/null
	return 0
}
if [ -x "$top/contrib/testbed.sh" ]; then
	testbed_up() { "$top/contrib/testbed.sh" up pair; }
	testbed_down() { "$top/contrib/testbed.sh" down; }
else
	echo "demo: contrib/testbed.sh not found, using the built-in two-namespace setup"
	testbed_up() { fallback_up; }
	testbed_down() { fallback_down; }
fi

server_pid=
teardown() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null
	testbed_down >/dev/null 2>&1
	rm -rf "$work"
}
trap teardown EXIT
trap 'exit 130' INT TERM

testbed_up >"$work/testbed.log" 2>&1 || { cat "$work/testbed.log"; die "testbed setup failed"; }
in_ns() { local n=$1; shift; nsenter --net="/run/netns/$n" "$@"; }
in_ns $ns_client ping -c 1 -W 2 $server_ip >/dev/null || die "testbed: $server_ip not reachable from $ns_client"

# --- measurements ----------------------------------------------------------
udp_in_datagrams() {
	in_ns $ns_server awk '/^Udp:/ { if (n++) print $2 }' /proc/net/snmp
}

# run_pingpong LABEL PRELOAD: leaves sockperf's client output in $work/LABEL.txt
# and the server kernel's UDP InDatagrams delta in $work/LABEL.kernel_udp.
run_pingpong() {
	local label=$1 preload=$2 before after i
	in_ns $ns_server env ${preload:+LD_PRELOAD=$preload} \
		sockperf sr -i $server_ip -p $port >"$work/$label.server.txt" 2>&1 &
	server_pid=$!
	for i in $(seq 50); do
		in_ns $ns_server ss -Hlun "sport = :$port" | grep -q . && break
		sleep 0.1
	done
	before=$(udp_in_datagrams)
	in_ns $ns_client env ${preload:+LD_PRELOAD=$preload} \
		sockperf pp -i $server_ip -p $port -m "$msg_size" -t "$seconds" >"$work/$label.txt" 2>&1
	local rc=$?
	after=$(udp_in_datagrams)
	echo $((after - before)) >"$work/$label.kernel_udp"
	kill "$server_pid" 2>/dev/null
	wait "$server_pid" 2>/dev/null
	server_pid=
	[ $rc -eq 0 ] || { cat "$work/$label.txt"; die "sockperf client ($label) failed"; }
}

# field LABEL NAME: one number from sockperf's report (avg, p50, p99, msgs).
field() {
	local f="$work/$1.txt"
	sed 's/\x1b\[[0-9;]*m//g' "$f" | case $2 in
	avg) sed -n 's/.*avg-latency=\([0-9.]*\).*/\1/p' ;;
	p50) sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' ;;
	p99) sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' ;;
	msgs) sed -n 's/.*\[Valid Duration\].*ReceivedMessages=\([0-9]*\).*/\1/p' ;;
	esac | tail -1
}

echo "demo: sockperf ping-pong, UDP $msg_size B, ${seconds} s, $ns_client -> $ns_server ($server_ip)"
echo "demo: run 1/2: kernel sockets"
run_pingpong kernel ""
echo "demo: run 2/2: LD_PRELOAD=$lib"
run_pingpong libvma "$lib"

# Offload means the datagrams bypass the server kernel's UDP stack; if the
# kernel counted (nearly) every one of them, the library passed them through.
vma_msgs=$(field libvma msgs)
kernel_udp=$(cat "$work/libvma.kernel_udp")
if [ -n "$vma_msgs" ] && [ "$kernel_udp" -ge $((vma_msgs / 2)) ]; then
	offload="offload: not yet (passthrough)"
else
	offload="offload: yes ($kernel_udp datagrams seen by the server kernel's UDP stack)"
fi

ratio() { awk -v k="$1" -v v="$2" 'BEGIN { if (k > 0 && v > 0) printf "%.2f", k / v; else print "-" }'; }

echo
printf 'UDP ping-pong %s B, %s s, veth between namespaces -- %s\n' "$msg_size" "$seconds" "$offload"
printf '%-22s %12s %12s %18s\n' "" "kernel" "libvma" "kernel/libvma"
for row in "avg latency (usec):avg" "p50 latency (usec):p50" "p99 latency (usec):p99" "messages:msgs"; do
	name=${row%%:*}
	key=${row##*:}
	k=$(field kernel "$key")
	v=$(field libvma "$key")
	printf '%-22s %12s %12s %18s\n' "$name" "${k:--}" "${v:--}" "$(ratio "$k" "$v")"
done
echo
echo "(latency ratio > 1 means libvma is faster; messages are round trips in the measured window)"
case $offload in
*passthrough*) echo "(libvma hands every call to the kernel today, so the columns differ only by run-to-run noise)" ;;
esac

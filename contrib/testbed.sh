#!/bin/bash
# Network-namespace testbed for libvma (root). Idempotent: "up" first removes
# what a previous run left, so a crashed test never poisons the next one.
#
#   testbed.sh up pair       vmatb-a (vmatb-a0 198.18.0.1/24) <-veth-> vmatb-b (vmatb-b0 198.18.0.2/24)
#   testbed.sh up routed     vmatb-c (vmatb-c0 198.18.1.1/24) <-> vmatb-r (198.18.1.254, 198.18.2.254)
#                            <-> vmatb-s (vmatb-s0 198.18.2.1/24); the router forwards
#   testbed.sh impair DROP_PCT DUP_PCT   router drops / duplicates that share of forwarded packets
#   testbed.sh down          removes every vmatb-* namespace (their nft tables go with them)
#   testbed.sh status
#
# TB_PREFIX (default vmatb) names the namespaces and interfaces (PREFIX-a,
# PREFIX-a0, ...; at most 8 characters): tests use their own prefix so they
# never tear down a testbed another run is using.
# Only 198.18.0.0/15 (the benchmarking range) is used. Each veth has one queue
# pair, so an AF_XDP socket on queue 0 sees every packet of the link, unless
# TB_QUEUES (1-16) asks for more: then the sender's kernel spreads flows over
# the receiver's queues by hash, as RSS on a multi-queue NIC does.
# TB_VETH_OFFLOADS=default leaves each veth's offloads as the kernel (and
# every container runtime) leaves them: TX checksum offload on, so frames a
# kernel end sends carry partial UDP/TCP checksums. The default (off) turns
# TX checksum offload off, so every frame carries a complete checksum.
# bpffs is mounted on the host /sys/fs/bpf, which processes started with
# `nsenter --net=/run/netns/NAME` share (`ip netns exec` remounts /sys).
set -euo pipefail

PREFIX=${TB_PREFIX:-vmatb}
QUEUES=${TB_QUEUES:-1}
OFFLOADS=${TB_VETH_OFFLOADS:-off}
[[ $OFFLOADS =~ ^(off|default)$ ]] || { echo "testbed: TB_VETH_OFFLOADS must be off or default, got '$OFFLOADS'" >&2; exit 1; }
[[ $QUEUES =~ ^([1-9]|1[0-6])$ ]] || { echo "testbed: TB_QUEUES must be 1-16, got '$QUEUES'" >&2; exit 1; }
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,7}$ ]] || { echo "testbed: TB_PREFIX must be 1-8 lowercase letters/digits, got '$PREFIX'" >&2; exit 1; }

die() { echo "testbed: $*" >&2; exit 1; }
ns() { local n=$1; shift; ip netns exec "$n" "$@"; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root"; }

mount_bpffs() {
	if ! mount | grep -q ' /sys/fs/bpf type bpf'; then
		mount -t bpf bpf /sys/fs/bpf 2>/dev/null || echo "testbed: could not mount bpffs on /sys/fs/bpf" >&2
	fi
}

make_ns() {
	ip netns del "$1" 2>/dev/null || true
	ip netns add "$1"
	ns "$1" ip link set lo up
}

# veth_pair NS_A IF_A NS_B IF_B
veth_pair() {
	ip link del "$2" 2>/dev/null || true
	ip link add "$2" numtxqueues $QUEUES numrxqueues $QUEUES type veth peer name "$4" numtxqueues $QUEUES numrxqueues $QUEUES
	ip link set "$2" netns "$1"
	ip link set "$4" netns "$3"
	ns "$1" ip link set "$2" up
	ns "$3" ip link set "$4" up
	# A veth leaves the UDP/TCP checksum of locally sent packets unfinished
	# (the peer's kernel never checks it); an XDP/AF_XDP receiver sees the
	# raw frame. With TB_VETH_OFFLOADS=off every host here computes
	# checksums in software, as a host behind a real NIC effectively does;
	# with default, libvma must trust the veth's frames as Linux does.
	[ "$OFFLOADS" = default ] && return 0
	ns "$1" ethtool -K "$2" tx off >/dev/null 2>&1 || echo "testbed: ethtool -K $2 tx off failed (is ethtool installed?)" >&2
	ns "$3" ethtool -K "$4" tx off >/dev/null 2>&1 || echo "testbed: ethtool -K $4 tx off failed (is ethtool installed?)" >&2
}

mac_of() { ns "$1" cat "/sys/class/net/$2/address"; }

up_pair() {
	down
	make_ns $PREFIX-a
	make_ns $PREFIX-b
	veth_pair $PREFIX-a $PREFIX-a0 $PREFIX-b $PREFIX-b0
	ns $PREFIX-a ip addr add 198.18.0.1/24 dev $PREFIX-a0
	ns $PREFIX-b ip addr add 198.18.0.2/24 dev $PREFIX-b0
	# Static neighbours: no ARP round trip in the first measured packet, and a
	# ring that steers only IPv4 TCP/UDP never has to answer ARP itself.
	ns $PREFIX-a ip neigh replace 198.18.0.2 lladdr "$(mac_of $PREFIX-b $PREFIX-b0)" dev $PREFIX-a0 nud permanent
	ns $PREFIX-b ip neigh replace 198.18.0.1 lladdr "$(mac_of $PREFIX-a $PREFIX-a0)" dev $PREFIX-b0 nud permanent
	mount_bpffs
	echo "testbed: pair up ($PREFIX-a/$PREFIX-a0 198.18.0.1 <-> $PREFIX-b/$PREFIX-b0 198.18.0.2)"
}

up_routed() {
	down
	make_ns $PREFIX-c
	make_ns $PREFIX-r
	make_ns $PREFIX-s
	veth_pair $PREFIX-c $PREFIX-c0 $PREFIX-r $PREFIX-r0
	veth_pair $PREFIX-s $PREFIX-s0 $PREFIX-r $PREFIX-r1
	ns $PREFIX-c ip addr add 198.18.1.1/24 dev $PREFIX-c0
	ns $PREFIX-r ip addr add 198.18.1.254/24 dev $PREFIX-r0
	ns $PREFIX-r ip addr add 198.18.2.254/24 dev $PREFIX-r1
	ns $PREFIX-s ip addr add 198.18.2.1/24 dev $PREFIX-s0
	ns $PREFIX-c ip route add 198.18.2.0/24 via 198.18.1.254
	ns $PREFIX-s ip route add 198.18.1.0/24 via 198.18.2.254
	ns $PREFIX-r sysctl -qw net.ipv4.ip_forward=1
	mount_bpffs
	echo "testbed: routed up ($PREFIX-c 198.18.1.1 <-> $PREFIX-r <-> $PREFIX-s 198.18.2.1)"
}

# Drop and duplicate in the router's forward chain. numgen random draws per
# rule, so the two percentages are independent. "dup to ADDR device DEV" (nf_dup_ipv4)
# routes a copy to the end host; the netdev family's "dup to DEV" would resend
# the frame with the router's own MAC as destination, which the host ignores.
impair() {
	local drop=${1:?DROP_PCT} dup=${2:?DUP_PCT}
	[[ $drop =~ ^[0-9]+$ && $drop -le 100 ]] || die "DROP_PCT must be 0..100, got '$drop'"
	[[ $dup =~ ^[0-9]+$ && $dup -le 100 ]] || die "DUP_PCT must be 0..100, got '$dup'"
	ip netns list | grep -qw $PREFIX-r || die "no router: run 'up routed' first"
	ns $PREFIX-r nft delete table ip vmatb 2>/dev/null || true
	ns $PREFIX-r nft -f - <<-EOF
	table ip vmatb {
		chain forward {
			type filter hook forward priority 0; policy accept;
			ip daddr 198.18.2.1 numgen random mod 100 < $dup counter dup to 198.18.2.1 device "$PREFIX-r1"
			ip daddr 198.18.1.1 numgen random mod 100 < $dup counter dup to 198.18.1.1 device "$PREFIX-r0"
			numgen random mod 100 < $drop counter drop
		}
	}
	EOF
	echo "testbed: router drops $drop% and duplicates $dup% of forwarded packets"
}

down() {
	local n
	for n in $(ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true); do
		ip netns del "$n"
	done
	# A veth end left in the root namespace by an interrupted "up".
	for n in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$PREFIX-" || true); do
		ip link del "$n" 2>/dev/null || true
	done
}

status() {
	local n found=0
	for n in $(ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true); do
		found=1
		echo "== $n"
		ns "$n" ip -br addr show | grep -v '^lo ' || true
		ns "$n" ip -d link show | grep -o 'prog/xdp.*' || true
		ns "$n" nft list ruleset 2>/dev/null | grep -E 'numgen|dup to' || true
	done
	[ $found = 1 ] || echo "testbed: down"
}

need_root
case "${1:-}" in
up)
	case "${2:-}" in
	pair) up_pair ;;
	routed) up_routed ;;
	*) die "usage: $0 up pair|routed" ;;
	esac ;;
impair) shift; impair "$@" ;;
down) down; echo "testbed: down" ;;
status) status ;;
*) die "usage: $0 up pair|up routed|impair DROP_PCT DUP_PCT|down|status" ;;
esac

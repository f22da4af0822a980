#!/bin/bash
# TCP goodput through a lossy router, kernel and libvma in the same run
# (issue 13: "through the 1%+1% lossy router at least the kernel's goodput").
#
#   tests/bench/lossy_bench.sh [BUILDDIR]      (root)
#
# Topology: contrib/testbed.sh up routed (client lossy-c 198.18.1.1, router
# lossy-r, server lossy-s 198.18.2.1) and impair DROP DUP (default 1 1: the
# router drops 1% and duplicates 1% of what it forwards, both directions).
# One iperf3 stream, client to server, SECONDS a run, in these pairings:
#   kernel -> kernel, the kernel's default congestion control (the client
#     namespace's net.ipv4.tcp_congestion_control, printed: bbr on the
#     development machine, cubic on a stock Debian)
#   kernel -> kernel with cubic (iperf3 -C cubic), when that is not the
#     default: loss-based as ours, so it answers "as good as Linux's TCP
#     under random loss"; BBR does not take random loss for congestion
#   libvma sender -> kernel receiver, VMA_TCP_CC_ALGO as set (0, LWIP's
#     NewReno, by default), again with VMA_TCP_CC_ALGO=1 (Cubic) and with
#     VMA_TCP_CC_ALGO=3 (BBR: the like-for-like figure where the kernel's
#     default is bbr), and BBR again with a 1 MB send buffer (iperf3 -w 1M;
#     our send buffer stays at its 128 KiB default where Linux's grows to
#     tcp_wmem[2], and a hole at its head stops the writer)
#   kernel sender (default congestion control) -> libvma receiver;
# ROUNDS rounds with the pairings interleaved (the machine is shared: what
# it does moves all of them alike). Prints each run's goodput (what the
# receiver got, MB/s) and the sender's retransmissions, then the median of
# each pairing and its ratios to the kernel's medians of the same run.
# Environment: ROUNDS (5), SECONDS_PER_RUN (4), DROP (1), DUP (1),
# LOSSY_PREFIX (lossy), BENCH_VMA_ENV (more VAR=value for the libvma end).
set -u
BUILD=${1:-build}
[ "$(id -u)" = 0 ] || { echo "lossy_bench: needs root" >&2; exit 2; }
BUILD=$(cd "$BUILD" && pwd) || exit 2
HERE=$(cd "$(dirname "$0")" && pwd)
TESTBED="$HERE/../../contrib/testbed.sh"
LIB=$BUILD/src/vma/.libs/libvma.so
[ -f "$LIB" ] || { echo "lossy_bench: no $LIB (build first)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "lossy_bench: needs iperf3" >&2; exit 2; }
ROUNDS=${ROUNDS:-5}
SECS=${SECONDS_PER_RUN:-4}
DROP=${DROP:-1}
DUP=${DUP:-1}
export TB_PREFIX=${LOSSY_PREFIX:-lossy}
VMA="env LD_PRELOAD=$LIB ${BENCH_VMA_ENV:-}"
TMP=$(mktemp -d /tmp/lossy_bench.XXXXXX)
cleanup() {
	pkill -f "iperf3 -s -1 -B 198.18.2.1 -p 1[5-9][0-9][0-9][0-9]" 2>/dev/null
	bash "$TESTBED" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
bash "$TESTBED" up routed >/dev/null || { echo "lossy_bench: testbed up routed failed" >&2; exit 2; }
bash "$TESTBED" impair "$DROP" "$DUP" >/dev/null || { echo "lossy_bench: impair failed" >&2; exit 2; }
C="nsenter --net=/run/netns/$TB_PREFIX-c"
KERNEL_CC=$($C sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo unknown)
S="nsenter --net=/run/netns/$TB_PREFIX-s"

port=15200
# one_run NAME SERVER_PREFIX CLIENT_PREFIX: appends "NAME MBps retrans" to $TMP/results
one_run() {
	local name=$1 spre=$2 cpre=$3 i
	port=$((port + 1))
	$S $spre iperf3 -s -1 -B 198.18.2.1 -p $port -J >"$TMP/srv.json" 2>"$TMP/srv.err" &
	local spid=$!
	for i in $(seq 50); do
		$S ss -ltn 2>/dev/null | grep -q ":$port " && break
		sleep 0.1
	done
	$C $cpre timeout $((SECS + 30)) iperf3 ${IPERF_CC:+-C $IPERF_CC} ${IPERF_W:+-w $IPERF_W} -c 198.18.2.1 -p $port -t "$SECS" -J >"$TMP/cli.json" 2>"$TMP/cli.err"
	local crc=$?
	wait "$spid"
	local res
	res=$(python3 - "$TMP/cli.json" <<-'EOF'
	import json, sys
	try:
	    d = json.load(open(sys.argv[1]))
	    e = d["end"]
	    print("%.1f %d" % (e["sum_received"]["bits_per_second"] / 8e6, e["sum_sent"].get("retransmits", -1)))
	except Exception as x:
	    print("n/a n/a")
	EOF
	)
	[ $crc = 0 ] || res="n/a n/a"
	echo "$name $res" >>"$TMP/results"
	printf '  %-28s %8s MB/s  retransmits %s\n' "$name" ${res}
}

echo "lossy_bench: iperf3 one stream through a router dropping $DROP% and duplicating $DUP%," \
	"$SECS s a run, $ROUNDS rounds; the kernel's congestion control: $KERNEL_CC"
for r in $(seq "$ROUNDS"); do
	echo "round $r"
	one_run "kernel-kernel-$KERNEL_CC" "" ""
	[ "$KERNEL_CC" = cubic ] || IPERF_CC=cubic one_run kernel-kernel-cubic "" ""
	one_run libvma-sender "" "$VMA"
	one_run libvma-sender-cubic "" "$VMA VMA_TCP_CC_ALGO=1"
	one_run libvma-sender-bbr "" "$VMA VMA_TCP_CC_ALGO=3"
	IPERF_W=1M one_run libvma-sender-bbr-w1M "" "$VMA VMA_TCP_CC_ALGO=3"
	one_run libvma-receiver "$VMA" ""
done
echo
python3 - "$TMP/results" "$KERNEL_CC" <<'EOF'
import statistics, sys
rows, order = {}, []
for line in open(sys.argv[1]):
    name, mbps, _ = line.split()
    if name not in order:
        order.append(name)
    if mbps != "n/a":
        rows.setdefault(name, []).append(float(mbps))
def median(name):
    return statistics.median(rows[name]) if rows.get(name) else None
bases = [("kernel-kernel-" + sys.argv[2], "x " + sys.argv[2])]
if sys.argv[2] != "cubic":
    bases.append(("kernel-kernel-cubic", "x cubic"))
print("%-28s %8s %8s %8s  %s" % ("pairing", "median", "min", "max",
      "ratio to the kernel's median (" + ", ".join(b[1][2:] for b in bases) + ")"))
for name in order:
    v = rows.get(name)
    if not v:
        print("%-28s %8s" % (name, "n/a"))
        continue
    m = statistics.median(v)
    ratios = ["%.2f%s" % (m / median(b), label) if median(b) else "n/a" for b, label in bases]
    print("%-28s %8.1f %8.1f %8.1f  %s" % (name, m, min(v), max(v), "  ".join(ratios)))
EOF

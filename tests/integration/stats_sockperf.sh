#!/bin/bash
# vma_stats against a real offloaded sockperf server (root).
# Usage: stats_sockperf.sh [build dir | path/to/libvma.so]; exit 0 pass, 1 fail, 77 skip.
# Checks: the server socket's Rx/Tx Offload packets equal the client's
# "[Total Run]" Sent/ReceivedMessages (UDP ping-pong, no loss on a veth);
# ring and RX/TX pool slots in -v 3; -v 5 lists the socket with its port and
# pid; -z zeroes the live counters; -l changes the live log level (an fd
# dump at DEBUG appears only while the level is DEBUG) and back; -d 2 prints
# per-second rates of a running throughput test; corrupt, truncated and
# foreign files give an error exit, not a crash; VMA_STATS_FILE receives the
# socket's record when the server exits.
set -u
ARG=${1:-$(dirname "$0")/../..}
if [ -d "$ARG" ]; then BUILD=$ARG; LIB=$ARG/src/vma/.libs/libvma.so
else LIB=$ARG; BUILD=$(dirname "$LIB")/../../..; fi
TOOL=$BUILD/tools/vma_stats/vma_stats
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -f "$LIB" ] && [ -x "$TOOL" ] || { echo "SKIP: no $LIB or $TOOL"; exit 77; }
command -v sockperf >/dev/null || { echo "SKIP: no sockperf"; exit 77; }
command -v ethtool >/dev/null || { echo "SKIP: needs ethtool (veth checksum offload)"; exit 77; }
LIB=$(readlink -f "$LIB")
TOOL=$(readlink -f "$TOOL")
HERE=$(cd "$(dirname "$0")" && pwd)
export TB_PREFIX=vmastsp
TMP=$(mktemp -d /tmp/stats_sockperf.XXXXXX)
SRV=
cleanup() {
	[ -n "$SRV" ] && kill "$SRV" 2>/dev/null
	bash "$HERE/../../contrib/testbed.sh" down >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
bash "$HERE/../../contrib/testbed.sh" up pair >/dev/null || { echo "SKIP: testbed"; exit 77; }
A="nsenter --net=/run/netns/$TB_PREFIX-a"
B="nsenter --net=/run/netns/$TB_PREFIX-b"
$A ethtool -K $TB_PREFIX-a0 tx off >/dev/null 2>&1
$B ethtool -K $TB_PREFIX-b0 tx off >/dev/null 2>&1
export VMA_STATS_SHMEM_DIR=$TMP/shm   # the tool reads it too (-k overrides)
mkdir -p "$VMA_STATS_SHMEM_DIR"
PORT=11911
fail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }
stats() { "$TOOL" -p "$SRV" -c 1 "$@"; }
# "Rx Offload: KB / packets / ..." of the first socket block.
offload() { stats -v 1 | awk -v k="$1 Offload:" 'index($0,k)==1 {print $5; exit}'; }
pingpong() {  # prints "sent received" of the client's [Total Run] line
	$A sockperf pp -i 198.18.0.2 -p $PORT -t "$1" --mps 1000 --dontwarmup 2>&1 |
		sed -n 's/.*\[Total Run\].*SentMessages=\([0-9]*\); ReceivedMessages=\([0-9]*\).*/\1 \2/p'
}

$B env LD_PRELOAD="$LIB" VMA_TRACELEVEL=3 VMA_STATS_FILE="$TMP/close.txt" \
	sockperf sr -i 198.18.0.2 -p $PORT >"$TMP/server.log" 2>&1 &
SRV=$!
for _ in $(seq 50); do [ -e "$VMA_STATS_SHMEM_DIR/vmastat.$SRV" ] && break; sleep 0.1; done
[ -e "$VMA_STATS_SHMEM_DIR/vmastat.$SRV" ] || { echo "FAIL: no stats file for pid $SRV"; cat "$TMP/server.log"; exit 1; }
sleep 0.5

read -r sent recvd < <(pingpong 1)
rx=$(offload Rx); tx=$(offload Tx)
echo "client: sent $sent received $recvd; server socket: Rx Offload $rx Tx Offload $tx"
# The server answers every request; a reply still in flight when the
# client's clock stops is sent by the server but not counted by the client.
replies_ok() { [ "$tx" = "$recvd" ] || [ "$tx" = $((recvd + 1)) ]; }
[ -n "$sent" ] && [ "$sent" -gt 0 ] && [ "$rx" = "$sent" ] && [ "$tx" = "$rx" ] && replies_ok
check $? "Rx Offload == the client's SentMessages, Tx Offload == Rx (== ReceivedMessages, +1 in flight)"
stats -v 1 | grep -q "^- UDP, Offloaded"; check $? "-v 1: the socket is shown offloaded"
FD=$(stats -v 1 | sed -n 's/.*Fd=\[\([0-9]*\)\].*/\1/p' | head -1)

V3=$(stats -v 3)
ring_rx=$(echo "$V3" | awk '/^RING=/{r=1} r && /^Rx Offload:/ {print $5; exit}')
echo "$V3" | grep -q "^RING=\[[0-9]*\] ($TB_PREFIX-b0)" && [ "${ring_rx:-0}" -ge "$sent" ]
check $? "-v 3: ring of $TB_PREFIX-b0 with Rx packets ($ring_rx) >= the socket's ($sent)"
echo "$V3" | grep -q "^BUFFER_POOL(RX)=\[[0-9]*\] Size: [1-9]" && echo "$V3" | grep -q "^BUFFER_POOL(TX)=\[[0-9]*\] Size: [1-9]"
check $? "-v 3: RX and TX buffer pools with their sizes"

V5=$("$TOOL" -v 5)
echo "$V5" | grep -Eq "^udp +Yes +198\.18\.0\.2:$PORT +0\.0\.0\.0:\* .* $SRV/sockperf"
check $? "-v 5: udp 198.18.0.2:$PORT offloaded, pid $SRV/sockperf"

"$TOOL" -p "$SRV" -z >/dev/null
rx=$(offload Rx); tx=$(offload Tx)
ring_rx=$(stats -v 3 | awk '/^RING=/{r=1} r && /^Rx Offload:/ {print $5; exit}')
[ "$rx" = 0 ] && [ "$tx" = 0 ] && [ "${ring_rx:-x}" -lt 5 ]
check $? "-z: socket Rx/Tx ($rx/$tx) and ring Rx ($ring_rx) zeroed while the server runs"
read -r sent recvd < <(pingpong 1)
rx=$(offload Rx); tx=$(offload Tx)
[ -n "$sent" ] && [ "$rx" = "$sent" ] && [ "$tx" = "$rx" ] && replies_ok
check $? "after -z the counters restart from 0: Rx $rx == sent $sent, Tx $tx (received $recvd)"

# -l: an fd dump at DEBUG reaches the server's log only while the level is DEBUG.
lines() { grep -c "VMA DEBUG" "$TMP/server.log"; }
"$TOOL" -p "$SRV" -S "$FD" debug >/dev/null; sleep 0.3; before=$(lines)
"$TOOL" -p "$SRV" -l debug >/dev/null && "$TOOL" -p "$SRV" -S "$FD" debug >/dev/null; sleep 0.3; during=$(lines)
"$TOOL" -p "$SRV" -l info >/dev/null && "$TOOL" -p "$SRV" -S "$FD" debug >/dev/null; sleep 0.3; after=$(lines)
echo "DEBUG lines in the server log: $before at INFO, $during after -l debug, $after after -l info"
[ "$before" = 0 ] && [ "$during" -gt 0 ] && [ "$after" = "$during" ]
check $? "-l debug then -l info take effect in the running server"
"$TOOL" -p "$SRV" -S "$FD" >/dev/null; sleep 0.3
grep -q "VMA INFO.*Rx Offload: .* / $rx / " "$TMP/server.log"
check $? "-S $FD logs the socket's counters through the server's logger"

pp_rx=$rx
$A sockperf tp -i 198.18.0.2 -p $PORT -t 6 --mps 2000 >"$TMP/tp.log" 2>&1 &
TP=$!
sleep 2   # sockperf's start and its 400 ms warm-up
D=$(timeout 10 "$TOOL" -p "$SRV" -d 2 -i 1 -c 2); rc=$?
wait $TP
tp_sent=$(sed -n 's/.*Total of \([0-9]*\) messages sent.*/\1/p' "$TMP/tp.log")
rates=$(echo "$D" | awk -v fd="$FD" '$1==fd && $2=="Rx:" {print $3}')
echo "-d 2 Rx pkt/s: $(echo $rates)"
[ $rc = 0 ] && [ "$(echo "$rates" | awk '$1>=1000 && $1<=3000' | wc -l)" = 2 ]
check $? "-d 2: two per-second reports of ~2000 pkt/s"

# Broken files next to a live process (the pid of this shell) must fail cleanly.
BAD=$TMP/bad; mkdir -p "$BAD"
bad_file() {  # $1 label; the file is already in place
	out=$("$TOOL" -k "$BAD" -p $$ -c 1 2>&1); rc=$?
	[ $rc = 1 ]; check $? "$1: exit 1, no crash ($(echo "$out" | head -1))"
}
cp "$VMA_STATS_SHMEM_DIR/vmastat.$SRV" "$BAD/vmastat.$$"
printf 'XXXXXXXX' | dd of="$BAD/vmastat.$$" conv=notrunc status=none
bad_file "corrupt magic"
cp "$VMA_STATS_SHMEM_DIR/vmastat.$SRV" "$BAD/vmastat.$$"; truncate -s 300 "$BAD/vmastat.$$"
bad_file "truncated file"
head -c 65536 /dev/urandom >"$BAD/vmastat.$$"
bad_file "foreign file"
: >"$BAD/vmastat.$$"
bad_file "empty file"

kill -INT "$SRV"; wait "$SRV" 2>/dev/null; SRV=
total=$((pp_rx + ${tp_sent:-0}))
grep -q "^VMA: \[fd=$FD\] Rx Offload: .* / $total / " "$TMP/close.txt"
check $? "VMA_STATS_FILE has fd $FD's record at exit: Rx Offload $total packets (pp $pp_rx + tp $tp_sent since -z)"
[ -e "$VMA_STATS_SHMEM_DIR"/vmastat.* ] 2>/dev/null; [ $? != 0 ]
check $? "the stats file is removed when the server exits"
[ $fail = 0 ] || { echo "--- server log"; tail -20 "$TMP/server.log"; echo "--- VMA_STATS_FILE"; cat "$TMP/close.txt"; }
exit $fail

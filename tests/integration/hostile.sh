#!/bin/bash
# An offloaded server under floods from a hostile peer (issue 12, "Tools
# that prove it"). Usage: hostile.sh BUILDDIR     exit 0 pass, 1 fail, 77 skip.
#
# tests/integration/hostile_target server runs under libvma in HST-b
# (198.18.0.2): TCP 17001 accepts and never reads (the attacker's
# connections land there), TCP 17002 reads and discards (the legitimate
# flow), UDP 17003 is never read. A plain kernel client in HST-a writes to
# 17002 for 3 s alone: the baseline. Then, one fresh server per mode,
# tests/hostile/hostile_peer (docs/hostile_peer.md) floods from HST-a with
# spoofed sources 198.18.0.100-.199 for ~3.5 s while the same client runs
# 3 s, and each mode must leave:
#   (a) the server alive;
#   (b) the legitimate flow at >= 0.5 x its baseline (the same client alone,
#       on the same server, just before the flood), its connection intact
#       (a second try when the first falls short: 2 shared cores);
#   (c) the server's peak RSS (VmHWM) under the baseline server's VmRSS + 64 MiB;
#   (d) a fresh connection after the flood moving >= 1 MB in 1 s (a ring
#       whose receive frames were all taken fails here).
#   (e) the defence that mode meets counted in the stats block (vma_stats
#       -v 3, "Lane stack (drops and defences)", docs/security.md): tiny
#       tcp_coalesced, holes tcp_ooo_drops, syn tcp_syncookies_sent,
#       ackflood challenge / invalid-segment ACKs sent or held, malformed
#       malformed_frames + tcp_bad_segments, udp0 the UDP socket's dropped
#       datagrams.
# Modes: tiny (1-byte segments pinning frames), holes (out-of-order data
# past a hole), syn (SYN flood), ackflood (RFC 5961 spray at the legitimate
# connection itself), malformed (broken frames), udp0 (zero-length UDP).
# Environment: HOSTILE_TB_PREFIX (default hst), HOSTILE_MODES (a subset, in
# order), HOSTILE_PPS (frames per second of the peer, default 50000; 0: as
# fast as it goes -- on a 2-core machine the tool then takes a core and the
# server's one thread spends the other on the flood: the legitimate flow
# loses throughput to CPU, not to memory, see docs/security.md),
# HOSTILE_KERNEL=1 (the same server without libvma: what the kernel does
# under the same floods, for reference), HOSTILE_VMA_ENV (more VAR=VALUE
# words for the libvma server), HOSTILE_PIN=0 (no CPU pinning, see below).
set -u
BUILD=${1:?usage: hostile.sh BUILDDIR}
. "$(dirname "$0")/pair_lib.sh"
pair_prereq tests/integration/hostile_target tests/hostile/hostile_peer
TGT=$BUILD/tests/integration/hostile_target
PEER=$BUILD/tests/hostile/hostile_peer
VMA_STATS=$BUILD/tools/vma_stats/vma_stats
pair_need "$VMA_STATS"
TB_PREFIX_OVERRIDE=${HOSTILE_TB_PREFIX:-}
MODES=${HOSTILE_MODES:-tiny holes syn ackflood malformed udp0}
PPS=${HOSTILE_PPS:-50000}
PEER_PID=""
# pair_cleanup SIGKILLs the server (SRV), then this stops the peer.
pair_extra_cleanup() {
	[ -n "$PEER_PID" ] && kill "$PEER_PID" 2>/dev/null
	wait 2>/dev/null
}
trap 'exit 143' TERM INT
pair_up hst hostile
SHM=$WORK/shm
mkdir -p "$SHM"
IFA=$TB_PREFIX-a0
DST=198.18.0.2
P_SINK=17001 P_DISC=17002 P_UDP=17003
LEGIT_SECS=3     # the client's run, baseline and under each flood
FLOOD_SECS=3.5   # the peer's flood (ackflood: within the client's run)
RSS_SLACK_KB=$((64 * 1024))
BUDGET_S=100     # no mode starts past this (the whole script stays under ~110 s)
if [ "${HOSTILE_KERNEL:-0}" = 1 ]; then
	PRE=(env)
	echo "INFO: HOSTILE_KERNEL=1: the server runs on kernel sockets (reference run, no vma_stats)"
else
	# shellcheck disable=SC2206 # HOSTILE_VMA_ENV: VAR=VALUE words
	PRE=(env LD_PRELOAD="$LIB" VMA_TRACELEVEL=2 VMA_STATS_SHMEM_DIR="$SHM" ${HOSTILE_VMA_ENV:-})
fi
# The server on one CPU, the client and the peer on another (as on two
# machines: the peer's own work, and the kernel's delivery of its frames to
# the ring, which runs on the sending CPU, are not charged to the server).
# Without this, on 2 cores, the baseline alone moved between 380 and 750
# MB/s from run to run. HOSTILE_PIN=0: no pinning.
PIN_SRV=() PIN_PEER=()
ncpu=$(nproc)
if [ "${HOSTILE_PIN:-1}" = 1 ] && [ "$ncpu" -ge 2 ] && command -v taskset >/dev/null; then
	PIN_SRV=(taskset -c $((ncpu - 1)))
	PIN_PEER=(taskset -c 0)
fi
fail=0 nfail=0
check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; nfail=$((nfail + 1)); fi; }

server_start() {  # server_start LABEL: sets SRV
	: >"$WORK/srv.$1.out"
	$B "${PIN_SRV[@]}" "${PRE[@]}" "$TGT" server $P_SINK $P_DISC $P_UDP >"$WORK/srv.$1.out" 2>"$WORK/srv.$1.err" &
	SRV=$!
	pair_wait_ready "$WORK/srv.$1.out" "$SRV" 100 0.05 && return 0
	echo "FAIL: $1: the server did not start"
	sed 's/^/  | /' "$WORK/srv.$1.out" "$WORK/srv.$1.err" | head -10
	kill -KILL "$SRV" 2>/dev/null
	wait "$SRV" 2>/dev/null
	SRV=""
	fail=1
	return 1
}

server_stop() {  # SIGTERM, 3 s, then SIGKILL; prints how it ended
	local rc
	[ -n "$SRV" ] || return 0
	kill -TERM "$SRV" 2>/dev/null
	for _ in $(seq 60); do kill -0 "$SRV" 2>/dev/null || break; sleep 0.05; done
	if kill -0 "$SRV" 2>/dev/null; then
		echo "  server did not exit 3 s after SIGTERM: killed"
		kill -KILL "$SRV" 2>/dev/null
	fi
	wait "$SRV" 2>/dev/null
	rc=$?
	[ $rc = 0 ] || echo "  server exit status $rc"
	SRV=""
}

alive() {
	kill -0 "$SRV" 2>/dev/null && [ "$(awk '/^State:/ {print $2}' "/proc/$SRV/status" 2>/dev/null)" != Z ]
}

mem_kb() {  # mem_kb VmRSS|VmHWM
	awk -v f="$1:" '$1 == f {print $2}' "/proc/$SRV/status" 2>/dev/null || echo 0
}

client() {  # client SECS: prints the client's line; its exit status
	$A "${PIN_PEER[@]}" timeout $(($1 + 8)) "$TGT" client $DST $P_DISC "$1" 2>&1
}

mbs_of() { awk '/^client:/ {print $2; exit}' <<<"$1"; }
acked_of() { awk '/^client:/ {for (i = 1; i < NF; i++) if ($i == "acked") print $(i + 1); exit}' <<<"$1"; }

# lane NAME: a counter of the server's "Lane stack" block (0 when absent).
lane() { awk -v n="$1" '$1 == n {print $2; f=1} END {if (!f) print 0}' "$WORK/stats.$MODE_NOW"; }

# check_counters MODE: prints what vma_stats -v 3 shows of the server's
# ring (frames received and dropped, the RX pool, the lane's defences) and,
# one line each, of its sockets (queued and dropped); checks (e).
check_counters() {
	local mode=$1 v what
	MODE_NOW=$mode
	[ "${HOSTILE_KERNEL:-0}" = 1 ] && return 0
	"$VMA_STATS" -k "$SHM" -p "$SRV" -v 3 -c 1 >"$WORK/stats.$mode" 2>&1 ||
		{ check 1 "$mode: (e) vma_stats failed: $(head -3 "$WORK/stats.$mode")"; return 0; }
	case $mode in
	tiny) v=$(lane tcp_coalesced); what="tcp_coalesced" ;;
	holes) v=$(lane tcp_ooo_drops); what="tcp_ooo_drops" ;;
	syn) v=$(lane tcp_syncookies_sent); what="tcp_syncookies_sent" ;;
	ackflood)
		v=$(($(lane tcp_challenge_acks) + $(lane tcp_challenge_acks_limited) + $(lane tcp_invalid_acks_limited)))
		what="challenge + held ACKs" ;;
	malformed) v=$(($(lane malformed_frames) + $(lane tcp_bad_segments))); what="malformed_frames + tcp_bad_segments" ;;
	udp0)
		v=$(awk '/^- UDP,/ {u = 1} /^Rx pkt :/ && u {print $11; exit}' "$WORK/stats.$mode")
		what="the UDP socket's dropped datagrams" ;;
	esac
	[ "${v:-0}" -gt 0 ] 2>/dev/null
	check $? "$mode: (e) counted in the stats block: $what = ${v:-0}"
	sed -n '/^Lane stack/,/^=/p' "$WORK/stats.$mode" | awk '$2 > 0 {print}' | sed "s/^ */  [$mode] lane: /" | grep -v "^  \[$mode\] lane: Lane"

	grep -E '^(RING=|Rx Offload|Tx Offload|Retransmissions|CQ=|BUFFER_POOL)' "$WORK/stats.$mode" |
		sed -n '/^RING=/,$p' | sed "s/^/  [$mode] vma_stats: /"
	awk -v m="$mode" '
		function flush() {
			if (fd != "") {
				n++
				if (n <= 6) printf "  [%s] vma_stats: fd %s %s %s <- %s: Rx %s pkts, queued now/max %s/%s, dropped %s pkts %s bytes\n",
					m, fd, kind, local, foreign, rxp, cur, max, pdrop, bdrop
			}
			fd = ""
		}
		/Fd=\[/ { flush(); fd = $0; gsub(/.*Fd=\[|\].*/, "", fd); next }
		/^- (TCP|UDP),/ { kind = $2 " " $NF; sub(/,/, "", kind); next }
		/^- Local Address/ { local = $NF; gsub(/[][]/, "", local); next }
		/^- Foreign Address/ { foreign = $NF; gsub(/[][]/, "", foreign); next }
		/^Rx Offload:/ { rxp = $5; next }
		/^Rx pkt :/ { cur = $5; max = $8; pdrop = $11; next }
		/^Rx byte:/ { bdrop = $10; next }
		/^=+$|^RING=/ { flush() }
		END { flush(); if (n > 6) printf "  [%s] vma_stats: ... %d sockets in all\n", m, n }
	' "$WORK/stats.$mode"
	return 0
}

echo "== baseline: the legitimate client alone for ${LEGIT_SECS} s"
server_start baseline || exit 1
out=$(client $LEGIT_SECS)
echo "  $out"
BASE=$(mbs_of "$out")
BASE_RSS=$(mem_kb VmRSS)
server_stop
if ! awk -v b="${BASE:-0}" 'BEGIN {exit !(b > 1)}'; then
	echo "FAIL: baseline: the legitimate client moved ${BASE:-nothing} MB/s with no flood"
	exit 1
fi
RSS_BOUND=$((BASE_RSS + RSS_SLACK_KB))
echo "  baseline ${BASE} MB/s, server VmRSS $((BASE_RSS / 1024)) MiB; bound under flood: VmHWM < $((RSS_BOUND / 1024)) MiB"

SUMMARY=()
run_mode() {  # run_mode MODE PEER_ARGS...
	local mode=$1 secs=$FLOOD_SECS f0=$nfail
	shift
	echo "== $mode"
	if [ $SECONDS -gt $BUDGET_S ]; then
		check 1 "$mode: not run, the script is past ${BUDGET_S} s"
		SUMMARY+=("$mode: not run (time)")
		return
	fi
	server_start "$mode" || { SUMMARY+=("$mode: server did not start"); return; }
	# This mode's own baseline, on the same server just before its flood:
	# the ratio compares runs seconds apart, not minutes. The throughput
	# check (b) gets a second try (baseline and flood again, on the same
	# server) when the first falls short: on 2 shared cores one run can
	# lose a scheduling race; a real loss shows in both.
	local bout bmbs cout crc mbs ratio prc=0 a=1 try pout=$WORK/peer.$mode.out
	for try in 1 2; do
		bout=$(client $LEGIT_SECS)
		bmbs=$(mbs_of "$bout")
		echo "  baseline: $bout"
		awk -v b="${bmbs:-0}" 'BEGIN {exit !(b > 1)}' || bmbs=$BASE
		[ "$mode" = ackflood ] && secs=$(awk -v s=$LEGIT_SECS 'BEGIN {print s - 0.3}')
		$A "${PIN_PEER[@]}" timeout $((LEGIT_SECS + 15)) "$PEER" "$mode" --if "$IFA" --dst $DST --secs "$secs" \
			--pps "$PPS" "$@" >"$pout" 2>&1 &
		PEER_PID=$!
		for _ in $(seq 160); do
			grep -qE 'flooding|waiting' "$pout" && break
			kill -0 "$PEER_PID" 2>/dev/null || break
			sleep 0.05
		done
		# Let the flood bite before the measured run (ackflood must see
		# the connection start, so the client goes at once).
		[ "$mode" = ackflood ] || sleep 0.3
		cout=$(client $LEGIT_SECS)
		crc=$?
		wait "$PEER_PID"
		prc=$?
		PEER_PID=""
		sed 's/^/  /' "$pout"
		echo "  legit: $cout"
		mbs=$(mbs_of "$cout")
		ratio=$(awk -v m="${mbs:-0}" -v b="$bmbs" 'BEGIN {printf "%.2f", m / b}')
		alive
		a=$?
		[ $a = 0 ] && [ $prc = 0 ] || break
		awk -v r="$ratio" 'BEGIN {exit !(r >= 0.5)}' && [ $crc = 0 ] && break
		[ $try = 1 ] && echo "  (b) short on the first try (${ratio}): once more"
	done
	[ $prc = 0 ]; check $? "$mode: hostile_peer ran (exit $prc)"
	check $a "$mode: (a) the server is alive"
	awk -v r="$ratio" 'BEGIN {exit !(r >= 0.5)}' && [ $crc = 0 ]
	check $? "$mode: (b) legitimate throughput ${mbs:-0} MB/s = ${ratio} x its baseline ${bmbs} MB/s (>= 0.5, try $try), connection held (client exit $crc)"
	local hwm=0 fout acked
	[ $a = 0 ] && hwm=$(mem_kb VmHWM)
	[ $a = 0 ] && [ "${hwm:-0}" -lt $RSS_BOUND ]
	check $? "$mode: (c) server VmHWM $((${hwm:-0} / 1024)) MiB < $((RSS_BOUND / 1024)) MiB"
	fout=$(client 1)
	acked=$(acked_of "$fout")
	[ "${acked:-0}" -ge 1000000 ]
	check $? "$mode: (d) a fresh connection after the flood: $fout"
	[ $a = 0 ] && check_counters "$mode"
	SUMMARY+=("$(printf '%-4s %-9s alive %-3s  legit %7s / %7s MB/s ratio %5s  VmHWM %4d MiB  fresh %10s bytes' \
		"$([ $nfail = $f0 ] && echo pass || echo FAIL)" "$mode" "$([ $a = 0 ] && echo yes || echo NO)" \
		"${mbs:-0}" "$bmbs" "$ratio" $((${hwm:-0} / 1024)) "${acked:-0}")")
	server_stop
}

for mode in $MODES; do
	case $mode in
	tiny) run_mode tiny --port $P_SINK --conns 16 ;;
	holes) run_mode holes --port $P_SINK --conns 32 --seg 1 ;;
	syn) run_mode syn --port $P_SINK ;;
	ackflood) run_mode ackflood --port $P_DISC --wait 5 ;;
	malformed) run_mode malformed --port $P_SINK --udp-port $P_UDP ;;
	udp0) run_mode udp0 --port $P_UDP ;;
	*) check 1 "unknown mode '$mode' in HOSTILE_MODES" ;;
	esac
done

echo "== summary (baseline ${BASE} MB/s, RSS bound $((RSS_BOUND / 1024)) MiB, ${SECONDS} s)"
for l in "${SUMMARY[@]}"; do echo "  $l"; done
[ $fail = 0 ] && echo "hostile: all checks passed"
exit $fail

# Shared set-up of the scripts that test against a kernel peer on the
# two-namespace testbed (contrib/testbed.sh "pair": 198.18.0.1 in
# $TB_PREFIX-a, 198.18.0.2 in $TB_PREFIX-b). Sourced after the script has
# checked its own prerequisites:
#   pair_up PREFIX NAME   brings the pair up under TB_PREFIX (the caller's
#                         environment wins) and sets WORK (a temporary
#                         directory), A and B (nsenter prefixes) and an EXIT
#                         trap that SIGKILLs the server pid in SRV, takes the
#                         pair down and removes WORK. Exit 77 if it cannot.
#   check RC TEXT         PASS when RC is 0, else FAIL (and fail=1).
#   snmp TABLE FIELD      a field of the server namespace's /proc/net/snmp
#                         (e.g. "Tcp: 11" InSegs, "Udp: 2" InDatagrams).
PAIR_TESTBED=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../contrib" && pwd)/testbed.sh
SRV=""
fail=0

pair_cleanup() {
	[ -n "$SRV" ] && kill -9 "$SRV" 2>/dev/null && wait "$SRV" 2>/dev/null
	bash "$PAIR_TESTBED" down >/dev/null 2>&1
	rm -rf "$WORK"
}

pair_up() {
	export TB_PREFIX=${TB_PREFIX_OVERRIDE:-$1}
	WORK=$(mktemp -d "/tmp/$2.XXXXXX")
	trap pair_cleanup EXIT
	bash "$PAIR_TESTBED" up pair >/dev/null || { echo "SKIP: testbed up pair failed"; exit 77; }
	A="nsenter --net=/run/netns/$TB_PREFIX-a"
	B="nsenter --net=/run/netns/$TB_PREFIX-b"
}

check() { if [ "$1" = 0 ]; then echo "PASS: $2"; else echo "FAIL: $2"; fail=1; fi; }

snmp() { $B awk -v t="$1" -v f="$2" '$1 == t {n++; if (n == 2) print $f}' /proc/net/snmp; }

#!/bin/bash
# d. Multithreaded TCP + UDP echo in one process, preloaded, every byte
# verified; plain build and the -O2 -D_FORTIFY_SOURCE=2 build, whose reads
# must really be the fortified __*_chk entry points.
. "$(dirname "$0")/lib.sh"
need nm

plain=$(need_helper mt_client) || exit 1
fortified=$(need_helper mt_client_fortify) || exit 1

for sym in __recv_chk __read_chk __poll_chk __recvfrom_chk; do
	nm -D "$fortified" | grep -q " U $sym" ||
		fail "mt_client_fortify does not call $sym (built without optimisation?)"
done

for prog in "$plain" "$fortified"; do
	preload "$prog" || fail "$(basename "$prog") under LD_PRELOAD"
done

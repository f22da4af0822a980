#!/bin/bash
# a. Python TCP echo over 127.0.0.1, server and client both preloaded:
# 64 MiB of random bytes, sha256 of what was sent == sha256 of the echo.
# The server runs once per readiness API (epoll, poll, select) and once
# with plain blocking sockets.
. "$(dirname "$0")/lib.sh"
need python3

MIB=${TCP_ECHO_MIB:-64}
for mode in epoll poll select blocking; do
	portfile="$TMP/port.$mode"
	start_bg preload python3 "$TESTDIR/tcp_echo.py" server "$mode" "$portfile"
	server_pid=$LAST_PID
	wait_file "$portfile"
	port=$(cat "$portfile")
	preload python3 "$TESTDIR/tcp_echo.py" client "$port" "$MIB" ||
		fail "client against $mode server"
	wait "$server_pid" || fail "$mode server exited with $?"
	log "ok: $mode server, $MIB MiB round-tripped"
done

#!/bin/bash
# e. fork, vfork+_exit, vfork+exec and a daemon-style double fork, preloaded:
# children use their own sockets, the parent's listener and data survive.
. "$(dirname "$0")/lib.sh"

prog=$(need_helper fork_sock) || exit 1
preload "$prog" || fail "fork_sock under LD_PRELOAD (exit $?)"

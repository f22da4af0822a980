#!/bin/bash
# isolate.sh CMD [ARG...]: run CMD (as root) in a network and mount namespace
# of its own, with its own /run/netns, sysfs and bpffs. Testbeds, vmad's
# pinned programs and the veths that CMD creates are then invisible to the
# host and to any other isolated run, so two test runs (say, two work trees)
# can use the same TB_PREFIX names at once. Everything goes away when CMD
# and its children have exited.
#   sudo contrib/isolate.sh tests/integration/run.sh build/src/vma/.libs/libvma.so
set -u
[ "$(id -u)" = 0 ] || { echo "isolate.sh: needs root" >&2; exit 2; }
[ $# -gt 0 ] || { echo "usage: isolate.sh CMD [ARG...]" >&2; exit 2; }
mkdir -p /run/netns
exec unshare --net --mount --propagation private bash -c '
set -e
mount -t tmpfs isolate-netns /run/netns
# sysfs shows the network namespace of whoever mounts it: mount it anew so
# /sys/class/net is this namespace'"'"'s; bpffs anew so pins are private.
mount -t sysfs isolate-sysfs /sys
mount -t bpf isolate-bpffs /sys/fs/bpf
ip link set lo up
set +e
exec "$@"' isolate "$@"

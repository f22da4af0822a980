#!/bin/bash
# The Debian 12 packages libvma needs to build and test: the one list that
# .ci/run, contrib/demo.sh and contrib/run_tests.sh all read.
#
#   contrib/deps.sh list      print the package names
#   contrib/deps.sh missing   print the ones not installed (exit 1 if any)
#   contrib/deps.sh install   apt-get install the missing ones (root)
set -u

VMA_DEPS=(
	# build
	autoconf automake libtool pkg-config make gcc libc6-dev binutils
	# optional parts configure looks for
	libnl-3-dev libnl-route-3-dev libbpf-dev libxdp-dev bpftool clang llvm
	libibverbs-dev
	# unit tests (Check), the sanitizer build and tests/fuzz (clang, libFuzzer)
	check libclang-rt-14-dev
	# contrib/build_packages.sh (Debian packages, lintian, a fresh root) and
	# tests/unit/check_man_pages.sh (groff)
	dpkg-dev debhelper lintian mmdebstrap groff-base
	# integration tests, benchmarks, demo, testbed
	python3 iperf3 iperf sockperf redis-server redis-tools nftables iproute2
	# tests/integration/nginx_workers.sh: a pre-fork server as deployed
	nginx-light apache2-utils curl
	iputils-ping procps psmisc coreutils ethtool strace
)

deps_missing() {
	local p status
	for p in "${VMA_DEPS[@]}"; do
		status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
		[ "$status" = "install ok installed" ] || printf '%s\n' "$p"
	done
}

# Packages such as redis-server start a system service on installation;
# our tests use their own ports, but a stray daemon on the machine is not
# wanted either, so stop it and keep it from starting at boot.
deps_stop_services() {
	local svc
	for svc in redis-server iperf3 nginx; do
		if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet "$svc" 2>/dev/null; then
			systemctl stop "$svc" || true
			systemctl disable "$svc" >/dev/null 2>&1 || true
		elif [ -x "/etc/init.d/$svc" ]; then
			"/etc/init.d/$svc" stop >/dev/null 2>&1 || true
		fi
	done
}

deps_install() {
	local missing
	missing=$(deps_missing)
	if [ -z "$missing" ]; then
		echo "deps: all ${#VMA_DEPS[@]} packages present"
		return 0
	fi
	if [ "$(id -u)" != 0 ]; then
		echo "deps: installing needs root; missing:" $missing >&2
		return 1
	fi
	echo "deps: installing:" $missing
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q || return 1
	# shellcheck disable=SC2086 # one word per package
	apt-get install -y -q --no-install-recommends $missing </dev/null || return 1
	deps_stop_services
}

case "${1:-}" in
list) printf '%s\n' "${VMA_DEPS[@]}" ;;
missing)
	missing=$(deps_missing)
	[ -z "$missing" ] || { printf '%s\n' "$missing"; exit 1; }
	;;
install) deps_install ;;
*)
	echo "usage: $0 list|missing|install" >&2
	exit 2
	;;
esac

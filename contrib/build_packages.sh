#!/bin/bash
# Builds the Debian packages (libvma, libvma-utils, libvma-dev) from this
# tree, checks them with lintian, installs them into a fresh Debian 12 root
# made by mmdebstrap and runs a smoke test from the installed files only
# (docs/packaging.md). Root, Debian 12, network to the Debian mirror.
#
#   contrib/build_packages.sh [--no-check] [--build-only] [--keep]
#
# 1. the files git tracks (the whole tree outside a git checkout) are
#    copied to a temporary directory, contrib/debian/ becomes debian/ there,
#    and `dpkg-buildpackage -us -uc -b` builds the packages (--no-check: with
#    DEB_BUILD_OPTIONS=nocheck, when make check already ran on this tree);
#    nothing is written into the source tree but build-deb/ (the .debs and
#    the logs);
# 2. lintian: any error fails, warnings are listed;
# 3. a fresh root: mmdebstrap --variant=apt (essential packages and apt) plus
#    the tools of the test (man-db, pkgconf, sockperf), kept as a tarball in
#    $PKG_CACHE (default /var/cache/libvma-pkgtest) for PKG_CACHE_DAYS
#    (default 7) days; then `apt-get install ./*.deb` in it, so the
#    packages' Depends must bring in every library they need;
# 4. smoke test, every program run from the root with chroot: the files and
#    conffiles of each package, the banner of LD_PRELOAD=libvma.so, the four
#    man pages, pkg-config, vma_stats, vmad with the shipped policy, and a
#    UDP and a TCP sockperf ping-pong between two namespaces of
#    contrib/testbed.sh (TB_PREFIX=vmapkg), libvma on both ends, with the
#    server namespace's kernel UDP/TCP counters flat (the traffic was
#    offloaded) and vma_stats showing the server's offloaded socket.
# Prints "ok:"/"FAIL:" per check and ends with "N passed, N failed"; exit 0
# all passed, 1 a failure, 77 skipped (a tool missing: contrib/deps.sh
# install). Inside contrib/isolate.sh (a network namespace with no route
# out) the downloads run in the network namespace isolate.sh was started
# from.
# Environment: JOBS (default 2), PKG_MIRROR (default
# http://deb.debian.org/debian), PKG_CACHE, PKG_CACHE_DAYS, PKG_OUT (default
# build-deb/ at the top of the tree).
set -u

top=$(cd "$(dirname "$0")/.." && pwd)
# Mounts made for the root (proc, sys, dev) and the testbed's namespace
# handles vanish with this private mount namespace, whatever happens.
if [ -z "${VMA_PKG_UNSHARED:-}" ] && [ "$(id -u)" = 0 ]; then
	VMA_PKG_UNSHARED=1 exec unshare --mount --propagation private "$0" "$@"
fi

no_check=0 build_only=0 keep=0
for arg in "$@"; do
	case $arg in
	--no-check) no_check=1 ;;
	--build-only) build_only=1 ;;
	--keep) keep=1 ;;
	*)
		echo "usage: $0 [--no-check] [--build-only] [--keep]" >&2
		exit 2
		;;
	esac
done

jobs=${JOBS:-2}
mirror=${PKG_MIRROR:-http://deb.debian.org/debian}
cache=${PKG_CACHE:-/var/cache/libvma-pkgtest}
cache_days=${PKG_CACHE_DAYS:-7}
out=${PKG_OUT:-$top/build-deb}
suite=bookworm
# What the smoke test runs besides the packages.
root_tools=man-db,pkgconf,sockperf,procps
export TB_PREFIX=vmapkg
srv_ns=/run/netns/vmapkg-b cli_ns=/run/netns/vmapkg-a
srv_ip=198.18.0.2

passed=0 failed=0
start_all=$(date +%s)
ok() { echo "ok: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
check() { # check DESCRIPTION CMD...: ok when CMD succeeds
	local what=$1
	shift
	if "$@"; then ok "$what"; else bad "$what"; fi
}
finish() {
	echo "packages: $(($(date +%s) - start_all)) s in all"
	echo "$passed passed, $failed failed"
	[ $failed -eq 0 ]
	exit
}
skip() { echo "SKIP: $*"; exit 77; }
phase() { echo "== $* ($(($(date +%s) - start_all)) s)"; }
# show_log FILE: the end of a log after a failure.
show_log() { tail -n 30 "$1" | sed 's/^/   | /'; }

[ "$(id -u)" = 0 ] || skip "needs root (chroot, network namespaces)"
for tool in dpkg-buildpackage dh lintian mmdebstrap; do
	command -v $tool >/dev/null || skip "$tool not installed (contrib/deps.sh install)"
done

# net CMD...: CMD where the mirror is reachable. contrib/isolate.sh gives
# an empty network namespace (no route out): the downloads then run in the
# network namespace of the nearest of our ancestors outside it (the shell
# that started isolate.sh), which waits for us, so it is there throughout.
net() {
	local pid=$$ mine ns
	mine=$(readlink /proc/self/ns/net)
	if [ -z "$(ip route show default 2>/dev/null)" ]; then
		while pid=$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) && [ "${pid:-0}" -gt 1 ]; do
			ns=$(readlink "/proc/$pid/ns/net" 2>/dev/null) || break
			if [ "$ns" != "$mine" ]; then
				nsenter --net="/proc/$pid/ns/net" "$@"
				return
			fi
		done
	fi
	"$@"
}

version=$(sed -n 's/^AC_INIT(\[libvma\], \[\([^]]*\)\].*/\1/p' "$top/configure.ac")
deb_version=$(sed -n '1s/^libvma (\([^)]*\)).*/\1/p' "$top/contrib/debian/changelog")
[ -n "$version" ] && [ "$version" = "$deb_version" ] || {
	bad "contrib/debian/changelog is at ${deb_version:-?}, configure.ac at ${version:-?}: add a changelog entry"
	finish
}

work=$(mktemp -d /tmp/vma-pkg.XXXXXX)
root=$work/root
mkdir -p "$out" "$root"
rm -f "$out"/*.deb "$out"/*.log
logs=$out
cleanup() {
	local pid p
	# The root being made in the background, if the build failed first.
	[ -n "${root_pid:-}" ] && wait "$root_pid" 2>/dev/null
	# Processes left in the root (a vmad --auto lingering): ours, by pid.
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] || continue
		pid=${p#/proc/}
		kill "$pid" 2>/dev/null
	done
	sleep 0.2
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill -9 "${p#/proc/}" 2>/dev/null
	done
	bash "$top/contrib/testbed.sh" down >/dev/null 2>&1
	for p in dev sys proc; do
		umount -R "$root/$p" 2>/dev/null
	done
	if [ $keep = 1 ]; then
		echo "kept $work"
	elif ! grep -q " $work/" /proc/self/mounts; then
		rm -rf --one-file-system "$work"
	else
		echo "warning: $work still has mounts, not removed"
	fi
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# ---- 3 (in the background while the packages build): the fresh root ----
make_root() {
	local key tarball start=$SECONDS
	key=$(printf '%s %s %s' "$suite" "$mirror" "$root_tools" | md5sum | cut -c1-12)
	tarball=$cache/root-$suite-$key.tar
	if [ -s "$tarball" ] && [ -n "$(find "$tarball" -mtime -"$cache_days" 2>/dev/null)" ]; then
		echo "root from the cache: $tarball"
	else
		mkdir -p "$cache" || return 1
		find "$cache" -name 'root-*.tar' -mtime +"$cache_days" -delete
		# A name ending in .tar makes mmdebstrap write a tarball; mv puts it
		# in place at once for a run of another tree using the cache.
		net mmdebstrap --variant=apt --mode=root --include="$root_tools" \
			"$suite" "$cache/new-$key.$$.tar" "$mirror" || { rm -f "$cache/new-$key.$$.tar"; return 1; }
		mv "$cache/new-$key.$$.tar" "$tarball"
	fi
	tar -C "$root" -xf "$tarball" || return 1
	echo "root ready in $((SECONDS - start)) s"
}
if [ $build_only = 0 ]; then
	make_root >"$logs/root.log" 2>&1 &
	root_pid=$!
fi

# ---- 1. build ----
phase "building the packages of libvma $version"
src=$work/libvma-$version
mkdir -p "$src"
# A git checkout (this tree's own, not one it was unpacked inside): what git
# tracks; otherwise (a release tarball) everything but build outputs.
git_top=$(git -C "$top" rev-parse --show-toplevel 2>/dev/null) || git_top=
if [ -n "$git_top" ] && [ "$(cd "$git_top" && pwd -P)" = "$(cd "$top" && pwd -P)" ]; then
	(cd "$top" && git ls-files | while read -r f; do [ -e "$f" ] && printf '%s\n' "$f"; done) >"$work/files"
else
	(cd "$top" && find . -path ./.git -prune -o -path './build*' -prune -o -path ./debian -prune -o \
		\( -type f -o -type l \) -print) >"$work/files"
fi
tar -C "$top" -cf - -T "$work/files" | tar -C "$src" -xf - || { bad "copying the tree to $src"; finish; }
cp -a "$src/contrib/debian" "$src/debian"
build_start=$(date +%s)
opts="parallel=$jobs"
[ $no_check = 1 ] && opts="$opts nocheck"
if (cd "$src" && DEB_BUILD_OPTIONS="$opts" dpkg-buildpackage -us -uc -b) >"$logs/build.log" 2>&1; then
	ok "dpkg-buildpackage -us -uc -b ($opts): $(cd "$work" && echo *.deb) in $(($(date +%s) - build_start)) s"
else
	bad "dpkg-buildpackage failed (build-deb/build.log):"
	show_log "$logs/build.log"
	finish
fi
cp "$work"/*.deb "$out"/

# ---- 2. lintian ----
phase "lintian"
lintian --no-tag-display-limit --show-overrides "$work"/libvma_"$deb_version"_*.changes >"$logs/lintian.log" 2>&1
errors=$(grep -c '^E: ' "$logs/lintian.log")
warnings=$(grep -c '^W: ' "$logs/lintian.log")
grep -E "^[EWO]: " "$logs/lintian.log" | sed 's/^/   /'
if [ "$errors" = 0 ] && ! grep -q '^internal error\|^error:' "$logs/lintian.log"; then
	ok "lintian: no error, $warnings warnings ($(grep -c '^O: ' "$logs/lintian.log") overridden in contrib/debian/libvma.lintian-overrides, with the reasons)"
else
	bad "lintian: $errors errors (build-deb/lintian.log)"
fi
[ $build_only = 1 ] && finish

# ---- 3. install into the fresh root ----
phase "installing into a fresh $suite root"
if ! wait "$root_pid"; then
	bad "making the root (mmdebstrap) failed (build-deb/root.log):"
	show_log "$logs/root.log"
	finish
fi
ok "fresh root: mmdebstrap --variant=apt + $root_tools ($(grep -q '^root from the cache' "$logs/root.log" &&
	echo 'from the cache, unpacked' || echo made) in $(sed -n 's/^root ready in \([0-9]*\) s$/\1/p' "$logs/root.log") s, beside the build)"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mkdir -p "$root/tmp/debs"
# The three packages (not the -dbgsym ones), as a user would install them.
for pkg in libvma libvma-utils libvma-dev; do
	cp "$work/${pkg}_${deb_version}"_*.deb "$root/tmp/debs/"
done
in_root() { chroot "$root" "$@"; }
if net chroot "$root" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -q --no-install-recommends /tmp/debs/*.deb' >"$logs/install.log" 2>&1; then
	ok "apt-get install of the three .debs in the root; new packages: $(awk '/^The following NEW packages/ { on = 1; next }
		/^[^ ]/ { on = 0 } on' "$logs/install.log" | xargs echo)"
else
	bad "installing the packages failed (build-deb/install.log):"
	show_log "$logs/install.log"
	finish
fi

# ---- 4. smoke test ----
phase "smoke test from the installed packages"
libdir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)
# Files each package must hold, and its conffiles.
has_files() { # PACKAGE FILE...
	local pkg=$1 f list
	shift
	list=$(in_root dpkg -L "$pkg") || return 1
	for f in "$@"; do
		grep -qx "$f" <<<"$list" || { echo "   $pkg lacks $f"; return 1; }
	done
}
check "libvma holds $libdir/libvma.so.9, the libvma.so link, libvma(7), libvma.conf(5)" \
	has_files libvma "$libdir/libvma.so.9" "$libdir/libvma.so" /usr/share/man/man7/libvma.7.gz \
	/usr/share/man/man5/libvma.conf.5.gz /usr/share/doc/libvma/parameters.md /usr/share/doc/libvma/README.md
check "libvma-utils holds vma_stats, vmad, their man pages and the vmad.service unit" \
	has_files libvma-utils /usr/bin/vma_stats /usr/sbin/vmad /usr/share/man/man8/vma_stats.8.gz \
	/usr/share/man/man8/vmad.8.gz /lib/systemd/system/vmad.service
check "libvma-dev holds mellanox/vma_extra.h and libvma.pc" \
	has_files libvma-dev /usr/include/mellanox/vma_extra.h "$libdir/pkgconfig/libvma.pc"
check "conffiles: /etc/libvma.conf (libvma), /etc/vmad.conf (libvma-utils)" sh -c "
	chroot '$root' dpkg-query -W -f='\${Conffiles}\n' libvma | grep -q '^ /etc/libvma.conf ' &&
	chroot '$root' dpkg-query -W -f='\${Conffiles}\n' libvma-utils | grep -q '^ /etc/vmad.conf '"
check "vmad.service is installed but not enabled" \
	test ! -e "$root/etc/systemd/system/multi-user.target.wants/vmad.service"

# The banner, with the library found by name as a user would preload it.
banner=$(in_root env LD_PRELOAD=libvma.so /bin/true 2>&1)
check "LD_PRELOAD=libvma.so: banner 'VMA INFO: VMA_VERSION: $version'" \
	grep -q "^VMA INFO: VMA_VERSION: $version\$" <<<"$banner"
[ $failed = 0 ] || echo "$banner" | head -5 | sed 's/^/   | /'

# man: each page found by name and rendered with its NAME line.
for page in libvma libvma.conf vma_stats vmad; do
	rendered=$(in_root env MANWIDTH=80 MANPAGER=cat LC_ALL=C.UTF-8 man "$page" 2>&1)
	check "man $page: $(grep -A1 '^NAME' <<<"$rendered" | tail -1 | sed 's/^ *//' | cut -c1-60)" \
		grep -qE "^ *${page//./\\.} +- " <<<"$rendered"
done

# pkg-config: Cflags and the preload path of the installed library.
check "pkg-config --cflags libvma works, --modversion is $version, --variable=preload is the library" sh -c "
	chroot '$root' pkg-config --cflags libvma >/dev/null &&
	[ \"\$(chroot '$root' pkg-config --modversion libvma)\" = '$version' ] &&
	[ \"\$(chroot '$root' pkg-config --variable=preload libvma)\" = '$libdir/libvma.so' ]"
check "vma_stats --version runs" sh -c "chroot '$root' vma_stats --version >/dev/null 2>&1"

# The Extra API header of libvma-dev: a program built with it (by the
# host's compiler, the root has none) gets the API table from the installed
# library when it is preloaded, and NULL without it.
cat >"$root/tmp/extra_api.c" <<'EOF_C'
#include <mellanox/vma_extra.h>
#include <stdio.h>
int main(void)
{
	struct vma_api_t *api = vma_get_api();
	printf("%s\n", api ? "api" : "none");
	return 0;
}
EOF_C
extra_api_check() {
	${CC:-cc} $(chroot "$root" pkg-config --cflags libvma) -I"$root/usr/include" \
		-o "$root/tmp/extra_api" "$root/tmp/extra_api.c" &&
		[ "$(chroot "$root" env LD_PRELOAD=libvma.so /tmp/extra_api 2>/dev/null)" = api ] &&
		[ "$(chroot "$root" /tmp/extra_api)" = none ]
}
check "<mellanox/vma_extra.h>: vma_get_api() returns the table under LD_PRELOAD=libvma.so, NULL without" \
	extra_api_check

# The testbed: two namespaces joined by a veth pair.
if ! bash "$top/contrib/testbed.sh" up pair >"$logs/testbed.log" 2>&1; then
	bad "contrib/testbed.sh up pair failed"
	show_log "$logs/testbed.log"
	finish
fi
# /sys after the testbed mounted bpffs on /sys/fs/bpf, so vmad's pins work.
mount --rbind /sys "$root/sys"
# Run in the background as `nsenter --net=NS chroot ROOT CMD... &`: nsenter
# and chroot exec, so $! is CMD's pid (vma_stats -p, kill); a shell function
# would put a subshell in between.

# vmad starts with the shipped policy (on a socket of its own).
nsenter --net="$srv_ns" chroot "$root" vmad --policy /etc/vmad.conf --socket /tmp/vmad-smoke.sock >"$logs/vmad.log" 2>&1 &
vmad_pid=$!
sleep 1
if kill -0 $vmad_pid 2>/dev/null; then
	kill -TERM $vmad_pid
	wait $vmad_pid
	check "vmad --policy /etc/vmad.conf starts and exits 0 on SIGTERM" test $? = 0
else
	wait $vmad_pid
	bad "vmad --policy /etc/vmad.conf did not start:"
	show_log "$logs/vmad.log"
fi

snmp() { # snmp NS PROTO FIELD: a counter of /proc/net/snmp in NS
	nsenter --net="$1" awk -v p="$2:" -v f="$3" \
		'$1 == p && !h { for (i = 2; i <= NF; i++) c[$i] = i; h = 1; next } $1 == p { print $c[f] }' /proc/net/snmp
}
wait_port() { # wait_port NS -u|-t PORT
	local i
	for i in $(seq 100); do
		[ -n "$(nsenter --net="$1" ss -Hln "$2" "sport = :$3" 2>/dev/null)" ] && return 0
		sleep 0.1
	done
	return 1
}
# exchange NAME SS_FLAG PORT SOCKPERF_FLAG...: sockperf ping-pong 3 s, libvma on
# both ends; the server namespace's kernel counter must stay flat.
exchange() {
	local name=$1 ssflag=$2 counter field port=$3 srv before after msgs
	shift 3
	case $name in
	UDP) counter=Udp field=InDatagrams ;;
	TCP) counter=Tcp field=InSegs ;;
	esac
	nsenter --net="$srv_ns" chroot "$root" env LD_PRELOAD=libvma.so VMA_STATS_FD_NUM=16 \
		sockperf server -i $srv_ip -p "$port" "$@" >"$logs/server-$name.log" 2>&1 &
	srv=$!
	if ! wait_port "$srv_ns" "$ssflag" "$port"; then
		bad "$name: sockperf server under libvma did not start (build-deb/server-$name.log)"
		show_log "$logs/server-$name.log"
		kill $srv 2>/dev/null
		return
	fi
	before=$(snmp "$srv_ns" $counter $field)
	nsenter --net="$cli_ns" chroot "$root" env LD_PRELOAD=libvma.so timeout 30 \
		sockperf ping-pong -i $srv_ip -p "$port" -t 3 -m 64 "$@" >"$logs/client-$name.log" 2>&1 &
	local cli=$!
	# vma_stats from the root on the server while the connection is up
	# (the client may take a while to start on a busy machine).
	local seen=1
	while kill -0 $cli 2>/dev/null; do
		sleep 0.3
		chroot "$root" vma_stats -p "$srv" -c 1 >"$logs/vma_stats-$name.log" 2>&1
		grep -qE '^Rx Offload: [0-9]+ / [1-9][0-9]* ' "$logs/vma_stats-$name.log" && { seen=0; break; }
	done
	wait $cli
	after=$(snmp "$srv_ns" $counter $field)
	kill -TERM $srv 2>/dev/null
	wait $srv 2>/dev/null
	msgs=$(sed -n 's/.*ReceivedMessages=\([0-9]*\).*/\1/p' "$logs/client-$name.log" | tail -1)
	if [ "${msgs:-0}" -ge 100 ]; then
		ok "$name ping-pong, libvma both ends: $msgs replies in 3 s"
	else
		bad "$name ping-pong: ${msgs:-no} replies (build-deb/client-$name.log)"
		show_log "$logs/client-$name.log"
		return
	fi
	check "$name offloaded: server namespace kernel $counter $field +$((after - before)) for $msgs messages" \
		test $((after - before)) -le 20
	check "$name: vma_stats -p (server) shows its socket offloaded, receiving: $(grep -m1 -E '^Rx Offload: [0-9]+ / [1-9]' \
		"$logs/vma_stats-$name.log" | cut -d'[' -f1)" test $seen = 0
}
exchange UDP -u 11111
exchange TCP -t 11112 --tcp
finish

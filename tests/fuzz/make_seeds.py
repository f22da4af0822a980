#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/corpus/ (all but fuzz_stats_reader's
block, which is dumped from a real process: see docs/fuzzing.md). Run from
anywhere; rewrites seed-* files only, never regress-* ones. The formats are
described at the top of each harness."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")

OUR_MAC = bytes([2, 0, 0, 0, 0, 1])
PEER_MAC = bytes([2, 0, 0, 0, 0, 2])
OUR_IP = bytes([10, 0, 0, 1])
PEER_IP = bytes([10, 0, 0, 2])


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip4(proto, payload, src=PEER_IP, dst=OUR_IP, ident=1, frag=0x4000, ttl=64):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), ident, frag, ttl, proto, 0, src, dst)
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + payload


def eth(ip, dst=OUR_MAC):
    return dst + PEER_MAC + b"\x08\x00" + ip


def udp(sport, dport, payload, src=PEER_IP, dst=OUR_IP, with_csum=True):
    u = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    if with_csum:
        c = csum(src + dst + struct.pack("!BBH", 0, 17, len(u)) + u) or 0xFFFF
        u = u[:6] + struct.pack("!H", c) + u[8:]
    return u


def tcp(sport, dport, seq, ack, flags, opts=b"", payload=b"", wnd=65535):
    opts += b"\0" * (-len(opts) % 4)
    off = (20 + len(opts)) // 4
    t = struct.pack("!HHIIBBHHH", sport, dport, seq & 0xFFFFFFFF, ack & 0xFFFFFFFF, off << 4, flags,
                    wnd, 0, 0) + opts + payload
    c = csum(PEER_IP + OUR_IP + struct.pack("!BBH", 0, 6, len(t)) + t)
    return t[:16] + struct.pack("!H", c) + t[18:]


FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
SYN_OPTS = bytes([2, 4, 5, 0xB4, 1, 3, 3, 7, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0])


def ts(val, ecr=0):
    return bytes([1, 1, 8, 10]) + struct.pack("!II", val, ecr)


def sack(*blocks):
    b = bytes([1, 1, 5, 2 + 8 * len(blocks)])
    for l, r in blocks:
        b += struct.pack("!II", l, r)
    return b


# ---- fuzz_stack_rx: ctl time op len(2) frame ----
FIX_IP, FIX_L4, REL, TIME, APP, BATCH, RELSACK = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40
ACTIVE, ACCEPTED = 0x00, 0x80      # op bit 7: connection for REL and APP
# active: peer 10.0.0.2:5001 <-> us :40000; accepted: peer :40001 <-> us :80


def rec(frame, ctl=FIX_IP | FIX_L4, tm=0, op=0):
    return struct.pack("!BBBH", ctl, tm, op, len(frame)) + frame


def seg(conn, seq, ack, flags, opts=b"", payload=b""):
    sport, dport = (5001, 40000) if conn == ACTIVE else (40001, 80)
    return eth(ip4(6, tcp(sport, dport, seq, ack, flags, opts, payload)))


def stack_seeds():
    s = {}
    s["udp"] = rec(eth(ip4(17, udp(1234, 5353, b"hello, stack"))))
    mc = bytes([224, 1, 2, 3])
    s["udp-multicast"] = rec(eth(ip4(17, udp(1234, 5353, b"group", dst=mc), dst=mc),
                                 dst=bytes([1, 0, 0x5E, 1, 2, 3])))
    big = udp(1234, 5353, bytes(range(256)) * 8)
    s["udp-fragments"] = (rec(eth(ip4(17, big[:1480], ident=7, frag=0x2000 | 0))) +
                          rec(eth(ip4(17, big[1480:], ident=7, frag=1480 // 8))))
    s["tcp-syn-listener"] = rec(eth(ip4(6, tcp(40005, 80, 0x1234, 0, SYN, SYN_OPTS))))
    s["tcp-data-accepted"] = (rec(seg(ACCEPTED, 0, 0, PSH | ACK, ts(100), b"GET / HTTP/1.0\r\n\r\n"),
                                  FIX_IP | FIX_L4 | REL | TIME, 50, ACCEPTED) +
                              rec(seg(ACCEPTED, 0, 0, FIN | ACK, ts(101)), FIX_IP | FIX_L4 | REL,
                                  0, ACCEPTED))
    s["tcp-data-active"] = (rec(seg(ACTIVE, 0, 0, PSH | ACK, ts(100), b"x" * 1000), FIX_IP | FIX_L4 | REL,
                                0, ACTIVE) +
                            rec(seg(ACTIVE, 0, 0, ACK, ts(101), b"y" * 500),
                                FIX_IP | FIX_L4 | REL | TIME, 200, ACTIVE))
    # the app writes 1 byte, then 4000, the peer acknowledges part, SACKs, time runs
    s["tcp-write-ack"] = (rec(seg(ACTIVE, 0, 0, ACK, ts(100)), FIX_IP | FIX_L4 | REL | APP, 0, 0x00) +
                          rec(seg(ACTIVE, 0, 1, ACK, ts(101)), FIX_IP | FIX_L4 | REL | APP, 0, 0x01) +
                          rec(seg(ACTIVE, 0, 1448, ACK, ts(102)), FIX_IP | FIX_L4 | REL | TIME,
                              5, 0x00) +
                          rec(seg(ACTIVE, 0, 0, ACK, ts(103)), FIX_IP | FIX_L4 | REL | TIME, 0x83, 0x00))
    s["tcp-out-of-order"] = (rec(seg(ACCEPTED, 100, 0, ACK, ts(100), b"later"), FIX_IP | FIX_L4 | REL,
                                 0, ACCEPTED) +
                             rec(seg(ACCEPTED, 300, 0, ACK, ts(100), b"much later"), FIX_IP | FIX_L4 | REL,
                                 0, ACCEPTED) +
                             rec(seg(ACCEPTED, 0, 0, ACK, ts(101), b"a" * 100), FIX_IP | FIX_L4 | REL,
                                 0, ACCEPTED))
    s["tcp-close-active"] = (rec(seg(ACTIVE, 0, 0, ACK, ts(100)), FIX_IP | FIX_L4 | REL | APP, 0, 0x05) +
                             rec(seg(ACTIVE, 0, 1, FIN | ACK, ts(101)), FIX_IP | FIX_L4 | REL | TIME,
                                 0xC0, ACTIVE))
    s["tcp-rst"] = rec(seg(ACCEPTED, 0, 0, RST | ACK, ts(100)), FIX_IP | FIX_L4 | REL, 0, ACCEPTED)
    s["tcp-batch"] = (rec(seg(ACTIVE, 0, 0, ACK, ts(100), b"1" * 100), FIX_IP | FIX_L4 | REL | BATCH, 0, 0) +
                      rec(seg(ACTIVE, 100, 0, ACK, ts(100), b"2" * 100), FIX_IP | FIX_L4 | REL | BATCH, 0, 0) +
                      rec(seg(ACCEPTED, 0, 0, ACK, ts(100), b"3" * 10), FIX_IP | FIX_L4 | REL, 0, ACCEPTED))
    # the app writes 20000 bytes; the peer SACKs around a lost first segment
    F = FIX_IP | FIX_L4 | REL
    s["tcp-sack-recovery"] = (rec(seg(ACTIVE, 0, 0, ACK, ts(100)), F | APP, 0, 0x01) +
                              rec(seg(ACTIVE, 0, 0, ACK, ts(101) + sack((1448, 2896))), F | RELSACK, 0, 0) +
                              rec(seg(ACTIVE, 0, 0, ACK, ts(102) + sack((1448, 4344))), F | RELSACK, 0, 0) +
                              rec(seg(ACTIVE, 0, 0, ACK, ts(103) + sack((1448, 5792))), F | RELSACK | TIME, 3, 0) +
                              rec(seg(ACTIVE, 0, 5792, ACK, ts(104)), F | TIME, 250, 0) +
                              rec(seg(ACTIVE, 0, 14480, ACK, ts(105)), F | TIME, 0x82, 0))
    # the peer closes first, then the app: CLOSE_WAIT, LAST_ACK
    s["tcp-passive-close"] = (rec(seg(ACCEPTED, 0, 0, FIN | ACK, ts(100)), F | APP, 0, ACCEPTED | 0x05) +
                              rec(seg(ACCEPTED, 1, 1, ACK, ts(101)), F | TIME, 10, ACCEPTED))
    s["timers"] = rec(seg(ACTIVE, 0, 0, ACK, ts(100)), FIX_IP | FIX_L4 | REL | APP | TIME, 0xFF, 0x08)
    return s


# ---- fuzz_tcp_opts: the option area ----
def opts_seeds():
    return {
        "syn": SYN_OPTS,
        "ts": ts(12345, 678),
        "sack-1": ts(1, 2) + sack((1000, 2000)),
        "sack-4": sack((1, 2), (3, 4), (5, 6), (7, 8)),
        "mss-ws": bytes([2, 4, 0x23, 0x28, 3, 3, 14, 0]),
        "bad-len": bytes([2, 3, 1, 8, 9, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0]),
        "end": bytes([1, 1, 0, 2, 4, 5, 0xB4]),
    }


# ---- fuzz_ip4_reass: cfg, then flags id off(2) len(2) payload ----
def frag(payload, off, more, ident=1, flags=0):
    return struct.pack("!BBHH", flags | (1 if more else 0), ident, off // 8, len(payload)) + payload


def reass_seeds():
    cfg = 3 | (3 << 3) | (3 << 5)
    d = udp(1234, 5353, bytes(i & 0xFF for i in range(3000)))
    d0 = udp(1234, 5353, bytes(200), with_csum=False)
    mc = bytes([224, 1, 2, 3])
    dm = udp(1234, 5353, b"m" * 1000, dst=mc)
    return {
        "in-order": bytes([cfg]) + frag(d[:1480], 0, True) + frag(d[1480:2960], 1480, True) +
                    frag(d[2960:], 2960, False),
        "reverse": bytes([cfg]) + frag(d[2960:], 2960, False, 2) + frag(d[1480:2960], 1480, True, 2) +
                   frag(d[:1480], 0, True, 2),
        "no-csum-small": bytes([cfg]) + frag(d0[:104], 0, True, 3, 0x08) + frag(d0[104:], 104, False, 3, 0x08),
        "multicast": bytes([cfg]) + frag(dm[:512], 0, True, 4, 0x10) + frag(dm[512:], 512, False, 4, 0x10),
        "duplicate-overlap": bytes([cfg]) + frag(d[:1480], 0, True, 5) + frag(d[:1480], 0, True, 5) +
                             frag(d[1000:2960], 1000, True, 5) + frag(d[2960:], 2960, False, 5),
        "timeout": bytes([cfg]) + frag(d[:1480], 0, True, 6, 0x06) + frag(d[1480:], 1480, False, 6),
        "evict": bytes([0]) + frag(d[:8], 0, True, 7) + frag(d[:8], 0, True, 8) +
                 frag(d[8:16], 8, False, 7),
        "raw": bytes([cfg]) + struct.pack("!BBHH", 0x80, 0, 0, 40) +
               ip4(17, udp(1, 5353, b"0123456789ab"), frag=0),
    }


# ---- fuzz_cfg_rules: sel, then the text ----
def rules_seeds():
    example = open(os.path.join(HERE, "..", "..", "libvma.conf"), "rb").read()
    return {
        "installed": b"\x10" + example,
        "doc-example": b"\x05" + b"""# tcp_lat started with VMA_APPLICATION_ID=B1
application-id tcp_lat B1
use vma tcp_client 192.168.1.0/24:*:*:*   # offload connections into 192.168.1.x
use os tcp_server *:5001                  # keep this listener in the kernel
use os udp_connect *:53
""",
        "all-roles": b"\x11" + b"""use os tcp_server 10.0.0.1:80-90
use vma tcp_client 10.0.0.0/8:1-1024:127.0.0.1:*
use os udp_sender 224.0.0.0/4:*
use os udp_receiver *:5353
use vma udp_connect 0.0.0.0/0:53:10.0.0.1/32:1000-2000
application-id redis-* *
use os tcp_server *:6379
application-id * B1
use os udp_receiver 1.2.3.4:0
""",
        "errors": b"\x02" + b"use vma tcp_server *:70000\nUSE os udp_sender *:1\nuse os\n"
                  b"application-id\nuse os udp_sender 1.2.3:4\nuse os udp_sender 1.2.3.4/33:*\n"
                  b"use os udp_sender *:5-4 extra\r\n\t  # comment\n",
    }


# ---- fuzz_cfg_params: NAME=VALUE lines ----
def params_seeds():
    return {
        "basic": b"VMA_TRACELEVEL=debug\nVMA_RX_POLL=100000\nVMA_MTU=1500\nVMA_LOG_FILE=/tmp/vma.%d.log\n",
        "spec": b"VMA_SPEC=latency\nVMA_TCP_TIMER_RESOLUTION_MSEC=1\nVMA_TIMER_RESOLUTION_MSEC=100\n",
        "spec-ultra": b"VMA_SPEC=10\nVMA_SELECT_POLL_OS_FORCE=1\nVMA_RING_ALLOCATION_LOGIC_RX=20\n",
        "bad": b"VMA_RX_POLL=abc\nVMA_MTU=-5\nVMA_TRACELEVEL=loud\nVMA_SPEC=nope\nVMA_TCP_CC_ALGO=7\n"
               b"VMA_RX_BUFS=99999999999999999999\nVMA_STATS_FILE=" + b"x" * 600 + b"\n",
    }


def write(harness, seeds):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, "seed-" + name), "wb") as f:
            f.write(data)


def main():
    write("fuzz_stack_rx", stack_seeds())
    write("fuzz_tcp_opts", opts_seeds())
    write("fuzz_ip4_reass", reass_seeds())
    write("fuzz_cfg_rules", rules_seeds())
    write("fuzz_cfg_params", params_seeds())
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Helper of vma_bench.sh: runs a client with its CPU time measured, turns
sockperf / iperf / ring_echo output into one JSON record per run, and prints
the side-by-side tables and the JSON report from those records.

  bench_report.py exec CPU_FILE -- CMD...    run CMD, write "user sys" seconds to CPU_FILE
  bench_report.py record KEY=VALUE...        print one JSON record (files are parsed)
  bench_report.py report RECORDS META JSON [--check] [--strict]
"""
import json
import os
import re
import subprocess
import sys

ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Kernel Tcp InSegs/OutSegs a run may add and still count as flat.
TCP_FLAT_SEGS = 10


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return ANSI.sub("", f.read())
    except OSError:
        return ""


def last_float(pattern, text):
    found = re.findall(pattern, text)
    return float(found[-1]) if found else None


def parse_sockperf_latency(text):
    """pp / ul client: half round trip latency in usec."""
    out = {"avg_us": last_float(r"avg-latency=\s*([0-9.]+)", text)}
    pcts = dict(re.findall(r"percentile\s+([0-9.]+)\s*=\s*([0-9.]+)", text))
    for key, name in (("50.000", "p50_us"), ("99.000", "p99_us"), ("99.900", "p999_us")):
        out[name] = float(pcts[key]) if key in pcts else None
    total = re.findall(r"\[Total Run\].*?SentMessages=(\d+);\s*ReceivedMessages=(\d+)", text)
    if total:
        out["sent"], out["received"] = int(total[-1][0]), int(total[-1][1])
    out["dropped"] = last_float(r"# dropped messages = (\d+)", text)
    return out


def parse_pp_client(text):
    """udp_pp_client: 'rounds=N lost=N avg_us=X p50_us=X p99_us=X'."""
    m = re.findall(r"rounds=(\d+) lost=(\d+) avg_us=([0-9.]+) p50_us=([0-9.]+) p99_us=([0-9.]+)", text)
    if not m:
        return {}
    rounds, lost, avg, p50, p99 = m[-1]
    return {"sent": int(rounds), "received": int(rounds) - int(lost), "avg_us": float(avg),
            "p50_us": float(p50), "p99_us": float(p99), "p999_us": None}


def parse_udp_lat_all(text):
    """vma_udp_lat: 'mode=M rounds=N lost=N avg_us=X p50_us=X p99_us=X p999_us=X',
    one line per method (several for -r mix: modes mix-recv, mix-zcopy...)."""
    m = re.findall(r"mode=([\w-]+) rounds=(\d+) lost=(\d+) avg_us=([0-9.]+) p50_us=([0-9.]+) p99_us=([0-9.]+) "
                   r"p999_us=([0-9.]+)", text)
    return [{"mode": mode, "sent": int(rounds), "received": int(rounds) - int(lost), "avg_us": float(avg),
             "p50_us": float(p50), "p99_us": float(p99), "p999_us": float(p999)}
            for mode, rounds, lost, avg, p50, p99, p999 in m]


def parse_udp_lat(text):
    """The last method line of vma_udp_lat's output."""
    lines = parse_udp_lat_all(text)
    return lines[-1] if lines else {}


def parse_sockperf_tp(client, server):
    """tp client: sender total and duration; sr server: its receive count."""
    out = {}
    sent = re.findall(r"Total of (\d+) messages sent in ([0-9.]+) sec", client)
    if sent:
        out["sent"], secs = int(sent[-1][0]), float(sent[-1][1])
        out["tx_rate"] = out["sent"] / secs if secs > 0 else None
        recv = re.findall(r"Total (\d+) messages received", server)
        if recv:
            out["received"] = int(recv[-1])
            out["rx_rate"] = out["received"] / secs if secs > 0 else None
            # Warm-up datagrams reach the server too; never report a gain.
            out["loss_pct"] = max(0.0, 100.0 * (1 - out["received"] / out["sent"])) if out["sent"] else None
    return out


def parse_iperf2_udp(client):
    """iperf2 -u client: the server report line '... X Mbits/sec J ms L/T (P%)'."""
    m = re.findall(r"([0-9.]+)\s+([KMG]?)bits/sec\s+([0-9.]+)\s+ms\s+(\d+)/\s*(\d+)\s+\(([0-9.e+-]+)%\)", client)
    if not m:
        return {}
    rate, unit, jitter, lost, total, pct = m[-1]
    scale = {"": 1e-6, "K": 1e-3, "M": 1.0, "G": 1e3}[unit]
    return {"rate_mbps": float(rate) * scale, "jitter_ms": float(jitter), "sent": int(total),
            "received": int(total) - int(lost), "loss_pct": float(pct)}


def first_json(text):
    """The first JSON object of a file that may also hold library banners."""
    dec = json.JSONDecoder()
    for m in re.finditer(r"^\{", text, re.M):
        try:
            return dec.raw_decode(text[m.start():])[0]
        except ValueError:
            continue
    return None


# A full TCP segment of the testbed's 1500 B MTU with timestamps: converts
# bulk bytes into the segments a kernel would have counted.
TCP_SEG_BYTES = 1448


def parse_iperf3(client, server):
    """iperf3 -c ... -J: receiver Gb/s, retransmits, both ends' CPU%."""
    doc = first_json(client)
    if doc is None:
        return {}
    out = {}
    if doc.get("error"):
        out["error"] = "iperf3: " + doc["error"]
    end = doc.get("end", {})
    recv, sent = end.get("sum_received", {}), end.get("sum_sent", {})
    if "bytes" in recv:
        out["bytes_received"] = int(recv["bytes"])
        out["gbps"] = recv.get("bits_per_second", 0) / 1e9
    if "bytes" in sent:
        out["bytes_sent"] = int(sent["bytes"])
        out["retransmits"] = sent.get("retransmits")
    cpu = end.get("cpu_utilization_percent", {})
    out["client_cpu_pct"] = cpu.get("host_total")
    out["server_cpu_pct"] = cpu.get("remote_total")
    sdoc = first_json(server)
    if sdoc and "bytes" in sdoc.get("end", {}).get("sum_received", {}):
        out["server_bytes_received"] = int(sdoc["end"]["sum_received"]["bytes"])
    # Message counts for the offload test and cpu/M: full-size segments.
    if out.get("bytes_sent"):
        out["sent"] = out["bytes_sent"] // TCP_SEG_BYTES
    if out.get("bytes_received"):
        out["received"] = out["bytes_received"] // TCP_SEG_BYTES
    return out


def parse_connrate(client, server):
    """tcp_connrate client: 'conns=N failed=N secs=X rate=X avg_us=X p50_us=X p99_us=X'."""
    m = re.findall(r"conns=(\d+) failed=(\d+) secs=([0-9.]+)(?: rate=([0-9.]+) avg_us=([0-9.]+) "
                   r"p50_us=([0-9.]+) p99_us=([0-9.]+))?", client)
    if not m:
        return {}
    conns, failed, secs, rate, avg, p50, p99 = m[-1]
    out = {"conns": int(conns), "failed": int(failed), "conn_rate": float(rate) if rate else None,
           "avg_us": float(avg) if avg else None, "p50_us": float(p50) if p50 else None,
           "p99_us": float(p99) if p99 else None}
    accepted = re.findall(r"accepted=(\d+)", server)
    out["accepted"] = int(accepted[-1]) if accepted else None
    out["sent"] = out["conns"] or None
    out["received"] = out["accepted"] if out["accepted"] else out["sent"]
    return out


def cmd_exec(argv):
    cpu_file, rest = argv[0], argv[1:]
    if rest and rest[0] == "--":
        rest = rest[1:]
    try:
        proc = subprocess.Popen(rest)
    except OSError as e:
        print(f"bench: cannot run {rest[0]}: {e}", file=sys.stderr)
        return 127
    _, status, usage = os.wait4(proc.pid, 0)
    with open(cpu_file, "w") as f:
        f.write(f"{usage.ru_utime:.4f} {usage.ru_stime:.4f}\n")
    return os.waitstatus_to_exitcode(status) & 0xFF


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def cmd_record(argv):
    a = dict(kv.split("=", 1) for kv in argv)
    kind = a.get("kind")
    rec = {k: a.get(k) for k in ("workload", "config", "kind", "proto", "error")}
    rec["size"] = int(a["size"]) if a.get("size") else None
    rec["seconds"] = num(a.get("seconds"))
    client, server = read_text(a.get("client_out", "")), read_text(a.get("server_out", ""))
    if kind in ("pp", "ul"):
        rec.update(parse_sockperf_latency(client))
    elif kind == "floor":
        rec.update(parse_pp_client(client))
    elif kind == "xapi":
        methods = parse_udp_lat_all(client)
        if len(methods) > 1 or any(m["mode"].startswith("mix-") for m in methods):
            # An interleaved run (-r mix): a record per method, named
            # CONFIG-METHOD; the run's CPU time is not theirs to split.
            for m in methods:
                one = dict(rec)
                one.update(m)
                one["config"] = f"{rec['config']}-{m['mode'][len('mix-'):]}"
                finish_record(one, kind, a, cpu=False)
            return 0
        rec.update(parse_udp_lat(client))
    elif kind == "tp":
        rec.update(parse_sockperf_tp(client, server))
    elif kind == "iperf2":
        rec.update(parse_iperf2_udp(client))
    elif kind == "iperf3":
        parsed = parse_iperf3(client, server)
        failure = parsed.pop("error", None)
        if failure and not rec.get("error"):
            rec["error"] = failure
        rec.update(parsed)
    elif kind == "connrate":
        rec.update(parse_connrate(client, server))
    finish_record(rec, kind, a)
    return 0


def finish_record(rec, kind, a, cpu=True):
    """CPU per message, kernel counters and offload flags; prints the record."""
    # Messages each side handled: pp/ul round trips, tp datagrams.
    msgs_client = rec.get("sent")
    msgs_server = rec.get("received") if kind in ("tp", "iperf2", "iperf3", "connrate") else rec.get("sent")
    cpu_times = read_text(a.get("client_cpu", "")).split() if cpu else []
    rec["client_cpu_s"] = sum(map(float, cpu_times)) if len(cpu_times) == 2 else None
    rec["server_cpu_s"] = num(a.get("server_cpu_s")) if cpu else None
    for side, msgs in (("client", msgs_client), ("server", msgs_server)):
        c = rec[f"{side}_cpu_s"]
        rec[f"{side}_cpu_s_per_M"] = c / (msgs / 1e6) if c is not None and msgs else None
    for k in ("srv_in", "srv_out", "cli_in", "cli_out"):
        rec[f"kernel_{k}"] = int(a[k]) if a.get(k, "").lstrip("-").isdigit() else None
    # Offloaded: the kernel of that namespace counted under 1% of the
    # messages: what the server received, what the client sent (a tp or ul
    # client receives no or few replies, so its InDatagrams prove nothing).
    # TCP: flat means a handful of segments at most. A kernel TCP sender
    # coalesces small writes into large segments, so "under 1% of the
    # messages" would call a pass-through tcp_tp64 offloaded; an offloaded
    # connection shows the kernel nothing at all.
    def bypassed(delta, msgs):
        if delta is None or not msgs:
            return None
        if rec.get("proto") == "tcp":
            return delta <= TCP_FLAT_SEGS
        return delta < 0.01 * msgs
    rec["server_offloaded"] = bypassed(rec["kernel_srv_in"], msgs_server)
    rec["client_offloaded"] = bypassed(rec["kernel_cli_out"], msgs_client)
    if not rec.get("error") and msgs_client is None:
        rec["error"] = "no result in the client output"
    print(json.dumps(rec))


def fmt(v, spec="{:.2f}", none="-"):
    return none if v is None else spec.format(v)


def ratio(a, b):
    return a / b if a is not None and b else None


# The issues' "done when", all against kernel sockets as users run them
# (blocking); the busy-polling kernel ratios are printed for information.
# (text, value key, test, workload whose absence means "not run", the
# offload flag a speed target needs or None).
TARGETS = (
    ("UDP pp64 libvma-both avg <= 0.15 x kernel (goal 0.10)", "pp_ratio", lambda v: v <= 0.15, "pp64", "udp_offloaded"),
    ("UDP pp64 libvma-both avg <= 1.3 x ring_echo floor", "floor_ratio", lambda v: v <= 1.3, "floor64", "udp_offloaded"),
    ("UDP tp64 libvma-both rx rate >= 3 x kernel", "tp_ratio", lambda v: v >= 3.0, "tp64", "udp_offloaded"),
    ("UDP tp64 libvma-both loss < 1%", "tp_loss", lambda v: v < 1.0, "tp64", "udp_offloaded"),
    ("server kernel UDP counters flat under libvma", "udp_offloaded", lambda v: v is True, "pp64", None),
    ("iperf2 -u works under libvma (both ends)", "iperf_ok", lambda v: v is True, "iperf2", None),
    ("TCP tcp_pp64 libvma-both avg <= 0.2 x kernel (goal 0.15)", "tcp_pp_ratio", lambda v: v <= 0.2, "tcp_pp64",
     "tcp_offloaded"),
    (f"kernel Tcp InSegs/OutSegs flat (<= {TCP_FLAT_SEGS}) under libvma, both namespaces", "tcp_offloaded",
     lambda v: v is True, "tcp_pp64", None),
    ("iperf3 completes under libvma (both ends), same byte count both sides", "iperf3_ok", lambda v: v is True,
     "iperf3", None),
    ("tcp_connrate completes under libvma (both ends)", "connrate_ok", lambda v: v is True, "connrate", None),
    # Issue 14: the Extra API's receive methods against plain offloaded
    # recv, by the median round trip of the interleaved run (libvma-mix:
    # both ends switch methods every 100 round trips, so the host's drift,
    # 10% between separate runs on a virtual machine, touches each alike;
    # 2 % allowed: zero copy saves one 64-byte copy). The separate runs'
    # ratios are printed for information.
    ("xapi64 socketxtreme_poll p50 <= libvma recv p50 (interleaved)", "xtreme_vs_recv", lambda v: v <= 1.02,
     "xapi64", "udp_offloaded"),
    ("xapi64 recvfrom_zcopy p50 <= libvma recv p50 (interleaved)", "zcopy_vs_recv", lambda v: v <= 1.02, "xapi64",
     "udp_offloaded"),
)


def tcp_flat(r):
    """Per side of a TCP run, whether its kernel's Tcp In and Out stayed flat."""
    def flat(a, b):
        if a is None or b is None:
            return None
        return a <= TCP_FLAT_SEGS and b <= TCP_FLAT_SEGS
    return flat(r.get("kernel_srv_in"), r.get("kernel_srv_out")), flat(r.get("kernel_cli_in"), r.get("kernel_cli_out"))


def libvma_sides(config):
    """(server, client): which ends of a configuration run under libvma."""
    return {"libvma-server": (True, False), "libvma-client": (False, True),
            "libvma-both": (True, True)}.get(config, (False, False))


def offl(r):
    """Which ends' kernels the traffic bypassed: srv, cli, both, yes or no."""
    if r.get("proto") == "tcp" and r["kind"] != "floor":
        srv, cli = tcp_flat(r)
    else:
        srv, cli = r.get("server_offloaded"), r.get("client_offloaded")
    if srv is None:
        return "-"
    if r["kind"] == "floor" or not r["config"].startswith("libvma"):
        return "yes" if srv else "no"
    return {(True, True): "both", (True, False): "srv", (False, True): "cli"}.get((srv, bool(cli)), "no")


def unavailable(r, key):
    """A failed run with no result of its own: 'n/a (reason)' instead of numbers."""
    return r.get(key) is None and r.get("error")


def row_head(r):
    return f"{r['workload']:<9} {r['config']:<13} "


def err(r):
    return f"  ERROR: {r['error']}" if r.get("error") else ""


def merge_rounds(runs):
    """The xapi rows ran several rounds: one row per configuration with the
    median of each latency over the rounds, the spread of the average (min
    and max) and the rounds themselves."""
    out, groups = [], {}
    for r in runs:
        if r.get("kind") != "xapi":
            out.append(r)
            continue
        key = (r["workload"], r["config"])
        if key not in groups:
            groups[key] = []
            out.append(key)
        groups[key].append(r)
    merged = []
    for item in out:
        if isinstance(item, dict):
            merged.append(item)
            continue
        rounds = groups[item]
        good = [r for r in rounds if r.get("avg_us") is not None]
        if not good:
            merged.append(rounds[-1])
            continue
        m = dict(good[len(good) // 2])
        for k in ("avg_us", "p50_us", "p99_us", "p999_us", "server_cpu_s_per_M", "client_cpu_s_per_M"):
            vals = sorted(r[k] for r in good if r.get(k) is not None)
            m[k] = vals[len(vals) // 2] if vals else None
        avgs = [r["avg_us"] for r in good]
        m["avg_min_us"], m["avg_max_us"] = min(avgs), max(avgs)
        m["rounds"] = len(good)
        m["round_avgs_us"] = avgs
        # Offloaded only when every round was.
        for k in ("server_offloaded", "client_offloaded"):
            flags = [r.get(k) for r in good]
            m[k] = None if None in flags else all(flags)
        failed = [r.get("error") for r in rounds if r.get("error")]
        if failed:
            m["error"] = f"{len(failed)} of {len(rounds)} rounds failed: {failed[-1]}"
        merged.append(m)
    return merged


def cmd_report(argv):
    records_path, meta_path, json_path = argv[:3]
    check = "--check" in argv[3:]
    strict = "--strict" in argv[3:]
    runs = merge_rounds([json.loads(l) for l in open(records_path) if l.strip()])
    meta = json.load(open(meta_path))
    by = {(r["workload"], r["config"]): r for r in runs}
    workloads = {r["workload"] for r in runs}

    def base(r, cfg, key):
        # The floor rows compare with the 64 B ping-pong of the same run.
        b = by.get(("pp64" if r["kind"] == "floor" else r["workload"], cfg))
        return b.get(key) if b else None

    main_value = {"pp": "avg_us", "ul": "avg_us", "floor": "avg_us", "tp": "rx_rate",
                  "iperf3": "gbps", "connrate": "conn_rate", "xapi": "avg_us"}
    for r in runs:
        key = main_value.get(r["kind"])
        if key:
            r["ratio_vs_kernel"] = ratio(r.get(key), base(r, "kernel", key))
            r["ratio_vs_kernel_bp"] = ratio(r.get(key), base(r, "kernel-bp", key))
        if r["kind"] == "xapi":
            # Each receive method of the Extra API against plain offloaded
            # recv: of its own runs, or (the interleaved rows) of the same run.
            recv = "libvma-mix-recv" if r["config"].startswith("libvma-mix-") else "libvma-recv"
            r["ratio_vs_recv"] = ratio(r.get("avg_us"), base(r, recv, "avg_us"))
            r["p50_ratio_vs_recv"] = ratio(r.get("p50_us"), base(r, recv, "p50_us"))
        if r.get("proto") == "tcp" and r["kind"] != "floor":
            r["kernel_tcp_flat_server"], r["kernel_tcp_flat_client"] = tcp_flat(r)

    lat = [r for r in runs if r["kind"] in ("pp", "ul", "floor")]
    tp = [r for r in runs if r["kind"] == "tp"]
    ip = [r for r in runs if r["kind"] == "iperf2"]
    bulk = [r for r in runs if r["kind"] == "iperf3"]
    conn = [r for r in runs if r["kind"] == "connrate"]
    xapi = [r for r in runs if r["kind"] == "xapi"]
    w = sys.stdout.write

    w(f"\nLatency: half round trip, usec; x = avg / kernel avg (lower is better); "
      f"cpu = CPU seconds per million round trips\n")
    w(f"{'workload':<9} {'config':<13} {'avg':>8} {'p50':>8} {'p99':>8} {'p99.9':>8} "
      f"{'x kern':>7} {'x k-bp':>7} {'cpu srv':>8} {'cpu cli':>8} {'srv kern in':>12} {'cli kern in':>12} "
      f"{'offload':>7}\n")
    for r in lat:
        if unavailable(r, "avg_us"):
            w(f"{row_head(r)}n/a ({r['error']})\n")
            continue
        w(f"{row_head(r)}{fmt(r.get('avg_us')):>8} {fmt(r.get('p50_us')):>8} "
          f"{fmt(r.get('p99_us')):>8} {fmt(r.get('p999_us')):>8} {fmt(r.get('ratio_vs_kernel')):>7} "
          f"{fmt(r.get('ratio_vs_kernel_bp')):>7} {fmt(r.get('server_cpu_s_per_M'), '{:.1f}'):>8} "
          f"{fmt(r.get('client_cpu_s_per_M'), '{:.1f}'):>8} {fmt(r.get('kernel_srv_in'), '{}'):>12} "
          f"{fmt(r.get('kernel_cli_in'), '{}'):>12} {offl(r):>7}{err(r)}\n")
    if tp:
        w(f"\nThroughput: messages/s; x = receiver rate / kernel's (higher is better); "
          f"cpu = CPU seconds per million messages\n")
        w(f"{'workload':<9} {'config':<13} {'sent/s':>10} {'recv/s':>10} {'loss%':>6} "
          f"{'x kern':>7} {'x k-bp':>7} {'cpu srv':>8} {'cpu cli':>8} {'srv kern in':>12} {'cli kern in':>12} "
          f"{'offload':>7}\n")
        for r in tp:
            if unavailable(r, "tx_rate"):
                w(f"{row_head(r)}n/a ({r['error']})\n")
                continue
            w(f"{row_head(r)}{fmt(r.get('tx_rate'), '{:.0f}'):>10} "
              f"{fmt(r.get('rx_rate'), '{:.0f}'):>10} {fmt(r.get('loss_pct')):>6} "
              f"{fmt(r.get('ratio_vs_kernel')):>7} {fmt(r.get('ratio_vs_kernel_bp')):>7} "
              f"{fmt(r.get('server_cpu_s_per_M'), '{:.1f}'):>8} {fmt(r.get('client_cpu_s_per_M'), '{:.1f}'):>8} "
              f"{fmt(r.get('kernel_srv_in'), '{}'):>12} {fmt(r.get('kernel_cli_in'), '{}'):>12} "
              f"{offl(r):>7}{err(r)}\n")
    if bulk:
        w("\nTCP bulk (iperf3, one stream): Gb/s at the receiver; x = / kernel's; "
          "cpu% = iperf3's own figure per end (100 = one core)\n")
        w(f"{'workload':<9} {'config':<13} {'Gb/s':>7} {'x kern':>7} {'retrans':>8} {'cpu srv%':>9} "
          f"{'cpu cli%':>9} {'bytes srv=cli':>13} {'srv kern in':>12} {'cli kern in':>12} {'offload':>7}\n")
        for r in bulk:
            if unavailable(r, "gbps"):
                w(f"{row_head(r)}n/a ({r['error']})\n")
                continue
            same = r.get("server_bytes_received")
            same = "-" if same is None else ("yes" if same == r.get("bytes_received") else "NO")
            w(f"{row_head(r)}{fmt(r.get('gbps')):>7} {fmt(r.get('ratio_vs_kernel')):>7} "
              f"{fmt(r.get('retransmits'), '{}'):>8} {fmt(r.get('server_cpu_pct'), '{:.1f}'):>9} "
              f"{fmt(r.get('client_cpu_pct'), '{:.1f}'):>9} {same:>13} {fmt(r.get('kernel_srv_in'), '{}'):>12} "
              f"{fmt(r.get('kernel_cli_in'), '{}'):>12} {offl(r):>7}{err(r)}\n")
    if conn:
        w("\nTCP connection setup (tcp_connrate: connect, server closes, close; one at a time): "
          "conns/s; x = / kernel's; cycle time usec\n")
        w(f"{'workload':<9} {'config':<13} {'conns/s':>9} {'x kern':>7} {'avg':>8} {'p50':>8} {'p99':>8} "
          f"{'failed':>7} {'srv kern in':>12} {'cli kern in':>12} {'offload':>7}\n")
        for r in conn:
            if unavailable(r, "conn_rate"):
                w(f"{row_head(r)}n/a ({r['error']})\n")
                continue
            w(f"{row_head(r)}{fmt(r.get('conn_rate'), '{:.0f}'):>9} {fmt(r.get('ratio_vs_kernel')):>7} "
              f"{fmt(r.get('avg_us')):>8} {fmt(r.get('p50_us')):>8} {fmt(r.get('p99_us')):>8} "
              f"{fmt(r.get('failed'), '{}'):>7} {fmt(r.get('kernel_srv_in'), '{}'):>12} "
              f"{fmt(r.get('kernel_cli_in'), '{}'):>12} {offl(r):>7}{err(r)}\n")
    if xapi:
        w("\nExtra API receive methods (vma_udp_lat ping-pong, both ends; half round trip, usec; medians of "
          "the rounds; avg min-max = the spread of the rounds' averages;\n"
          "x recv = avg / libvma-recv avg, p50 x = p50 / libvma-recv p50; the libvma-mix-* rows: one run whose two ends\n"
          "switch methods every 100 round trips (VMA_SOCKETXTREME=1), each row against libvma-mix-recv)\n")
        w(f"{'workload':<9} {'config':<17} {'avg':>8} {'avg min-max':>13} {'p50':>8} {'p99':>8} {'p99.9':>8} "
          f"{'x kern':>7} {'x k-bp':>7} {'x recv':>7} {'p50 x':>7} {'cpu srv':>8} {'cpu cli':>8} "
          f"{'offload':>7}\n")
        def xapi_head(r):
            return f"{r['workload']:<9} {r['config']:<17} "

        for r in xapi:
            if unavailable(r, "avg_us"):
                w(f"{xapi_head(r)}n/a ({r['error']})\n")
                continue
            spread = (f"{r['avg_min_us']:.2f}-{r['avg_max_us']:.2f}" if r.get("avg_min_us") is not None else "-")
            w(f"{xapi_head(r)}{fmt(r.get('avg_us')):>8} {spread:>13} {fmt(r.get('p50_us')):>8} "
              f"{fmt(r.get('p99_us')):>8} {fmt(r.get('p999_us')):>8} {fmt(r.get('ratio_vs_kernel')):>7} "
              f"{fmt(r.get('ratio_vs_kernel_bp')):>7} {fmt(r.get('ratio_vs_recv')):>7} "
              f"{fmt(r.get('p50_ratio_vs_recv')):>7} {fmt(r.get('server_cpu_s_per_M'), '{:.1f}'):>8} "
              f"{fmt(r.get('client_cpu_s_per_M'), '{:.1f}'):>8} {offl(r):>7}{err(r)}\n")
    if ip:
        w("\niperf2 -u smoke (-b 100M)\n")
        for r in ip:
            w(f"{r['workload']:<9} {r['config']:<13} {fmt(r.get('rate_mbps'), '{:.1f}')} Mbit/s, "
              f"loss {fmt(r.get('loss_pct'))}%, srv kern in {fmt(r.get('kernel_srv_in'), '{}')}, "
              f"offload {offl(r)}{err(r)}\n")

    def get(workload, config):
        return by.get((workload, config), {})

    # UDP: the server kernel of every libvma run stayed flat.
    udp_vma = [r for r in runs if r["config"].startswith("libvma") and r["kind"] != "floor"
               and r.get("proto") != "tcp"]
    udp_flags = [r.get("server_offloaded") for r in udp_vma if r.get("server_offloaded") is not None]
    # TCP: every end that ran libvma kept its kernel's Tcp counters flat.
    tcp_flags = []
    for r in runs:
        if r.get("proto") != "tcp" or r.get("error"):
            continue
        for under, flat in zip(libvma_sides(r["config"]), tcp_flat(r)):
            if under and flat is not None:
                tcp_flags.append(flat)
    ip3 = by.get(("iperf3", "libvma-both"))
    cr = by.get(("connrate", "libvma-both"))
    iperf_vma = by.get(("iperf2", "libvma-both"))
    values = {
        "pp_ratio": ratio(get("pp64", "libvma-both").get("avg_us"), get("pp64", "kernel").get("avg_us")),
        "floor_ratio": ratio(get("pp64", "libvma-both").get("avg_us"), get("floor64", "ring_echo").get("avg_us")),
        "tp_ratio": get("tp64", "libvma-both").get("ratio_vs_kernel"),
        "tp_loss": get("tp64", "libvma-both").get("loss_pct"),
        "udp_offloaded": all(udp_flags) if udp_flags else None,
        "iperf_ok": (bool(iperf_vma.get("received")) and not iperf_vma.get("error")) if iperf_vma else None,
        "tcp_pp_ratio": ratio(get("tcp_pp64", "libvma-both").get("avg_us"), get("tcp_pp64", "kernel").get("avg_us")),
        "tcp_offloaded": all(tcp_flags) if tcp_flags else None,
        "iperf3_ok": (bool(ip3.get("bytes_received")) and not ip3.get("error")
                      and ip3.get("server_bytes_received") == ip3.get("bytes_received")) if ip3 else None,
        "connrate_ok": (bool(cr.get("conns")) and not cr.get("error")) if cr else None,
        "xtreme_vs_recv": get("xapi64", "libvma-mix-xtreme").get("p50_ratio_vs_recv"),
        "zcopy_vs_recv": get("xapi64", "libvma-mix-zcopy").get("p50_ratio_vs_recv"),
    }
    targets, missed = [], 0
    for text, key, ok, workload, needs in TARGETS:
        v = values[key]
        state = "n/a" if v is None else ("met" if ok(v) else "missed")
        # A pass-through library can only match the kernel by noise: a
        # speed target counts only with the traffic off the kernel.
        if state == "met" and needs and not values[needs]:
            state = "no-offl"
        if workload not in workloads:
            state = "not run"  # --quick leaves iperf2 out; BENCH_WORKLOADS others
        missed += state not in ("met", "not run")
        targets.append({"target": text, "value": v, "state": state})

    w("\n")
    for proto, flag, what in (("UDP", "udp_offloaded", "server kernel's Udp counters"),
                              ("TCP", "tcp_offloaded", "kernel Tcp counters of each libvma end")):
        v = values[flag]
        if v is None:
            w(f"offload {proto}: unknown (no libvma run produced a result)\n")
        elif v:
            w(f"offload {proto}: yes (the {what} stayed flat under libvma)\n")
        else:
            w(f"offload {proto}: no (the {what} counted the libvma runs' traffic: "
              f"the library passed it through)\n")
    failed = [r for r in runs if r.get("error")]
    if failed:
        w(f"failed runs: {len(failed)} ({', '.join(r['workload'] + ' ' + r['config'] for r in failed)})\n")
    w("targets (ratios against kernel sockets as run by default, i.e. blocking;\n"
      "         no-offl = the number is in range but the traffic went through the kernel):\n")
    for t in targets:
        v = t["value"]
        shown = "-" if v is None else (v if isinstance(v, bool) else f"{v:.3f}")
        w(f"  {t['state']:<7} {t['target']} ({shown})\n")

    report = {"meta": meta, "offloaded": values["udp_offloaded"], "tcp_offloaded": values["tcp_offloaded"],
              "targets": targets, "runs": runs}
    with open(json_path, "w") as f:
        json.dump(report, f, indent=1)
    w(f"JSON: {json_path}\n")
    return 1 if (check and missed) or (strict and failed) else 0


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, argv = sys.argv[1], sys.argv[2:]
    handlers = {"exec": cmd_exec, "record": cmd_record, "report": cmd_report}
    if cmd not in handlers:
        print(__doc__, file=sys.stderr)
        return 2
    return handlers[cmd](argv)


if __name__ == "__main__":
    sys.exit(main())

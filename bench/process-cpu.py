#!/usr/bin/env python3
"""What each process on this host spends per job while a queue drains to an HTTP sink.

Runs a drain command (any system's driver: ours, a queue peer's), reads the sink's
request count (`GET /stats`, field `requests`) and every process's CPU time (user and
system, from /proc/<pid>/stat) five times a second, and prints the CPU per request of
each group of processes (the driver, PostgreSQL's backends by database, the sink, the
rest by name) between the moments the sink had answered 10 % and 90 % of N requests,
beside the whole host's busy time (/proc/stat).

    bench/process-cpu.py N LABEL -- COMMAND [ARGS...]

    bench/process-cpu.py 100000 ours -- target/release/bench peer-driver --n 100000 \\
        --db postgresql://postgres@127.0.0.1:5432/bench_ext --sink http://127.0.0.1:18080

SINK (default http://127.0.0.1:18080) is the sink the drain sends to; it is reset first.
CWD runs the command elsewhere. A process that ended inside the window is not counted
(the drivers keep their database connections for the whole drain). The sampling costs
about 1.5 µs of CPU per request at 20,000 requests a second, in the host's figure only.
Linux only; PostgreSQL must run on this host for its backends to be counted.
"""

import json
import os
import re
import subprocess
import sys
import time
import urllib.request

SINK = os.environ.get("SINK", "http://127.0.0.1:18080")
TICKS = os.sysconf("SC_CLK_TCK")
SAMPLE_EVERY = 0.2


def sink_requests():
    with urllib.request.urlopen(SINK + "/stats") as answer:
        return json.load(answer)["requests"]


def group_of(pid, comm):
    """The group a process's CPU is counted in, read while it runs."""
    if comm == "postgres":
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                title = f.read().replace("\0", " ")
        except OSError:
            return "PostgreSQL, other processes"
        # A backend's title: "postgres: 15/main: USER DATABASE HOST(PORT) STATE".
        backend = re.match(r"postgres: [^:]+: \S+ (\S+) \S+\(\d+\)", title)
        if backend:
            return f"PostgreSQL backends ({backend.group(1)})"
        return "PostgreSQL, other processes"
    if comm in ("node", "bench", "python3", "python") or comm.startswith("tokio-rt"):
        return "driver"
    if "sink" in comm:
        return "sink"
    return "other: " + re.sub(r"[-/].*$", "", comm)


def processes():
    """pid -> (group, CPU ticks) of every process now."""
    seen = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        seen[int(entry)] = (group_of(entry, comm), int(fields[11]) + int(fields[12]))
    return seen


def host_busy_and_total():
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:9]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        sys.exit("usage: process-cpu.py N LABEL -- COMMAND [ARGS...]")
    n, label, command = int(sys.argv[1]), sys.argv[2], sys.argv[4:]
    urllib.request.urlopen(urllib.request.Request(SINK + "/reset", method="POST")).read()
    me = os.getpid()
    drain = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=os.environ.get("CWD"),
    )
    samples = []
    while drain.poll() is None:
        try:
            answered = sink_requests()
        except OSError:
            answered = 0
        samples.append((time.time(), answered, processes(), host_busy_and_total()))
        time.sleep(SAMPLE_EVERY)
    if drain.returncode != 0:
        sys.exit(f"{label}: the drain command failed with exit code {drain.returncode}")
    try:
        start = next(s for s in samples if s[1] >= 0.1 * n)
        end = next(s for s in samples if s[1] >= 0.9 * n)
    except StopIteration:
        sys.exit(f"{label}: the sink never answered 90 % of {n} requests while sampled")
    requests = end[1] - start[1]
    seconds = end[0] - start[0]
    per_request = lambda ticks: ticks / TICKS * 1e6 / requests
    groups = {}
    for pid, (group, ticks) in end[2].items():
        before = start[2].get(pid)
        if pid == me or (before and before[0] != group):
            continue
        used = ticks - (before[1] if before else 0)
        if used > 0:
            groups[group] = groups.get(group, 0) + used
    busy = end[3][0] - start[3][0]
    total = end[3][1] - start[3][1]
    print(
        f"{label}: {requests} requests in {seconds:.2f} s = {requests / seconds:,.0f}/s; "
        f"host {100 * busy / total:.0f} % busy, {per_request(busy):.1f} µs of CPU per request"
    )
    for group, ticks in sorted(groups.items(), key=lambda item: -item[1])[:8]:
        print(f"  {group:40s} {per_request(ticks):6.1f} µs per request")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Time in the log, measured on the standalone runtime (release build):

  reset:     a one-partition topic of RESET_EVENTS 100-byte events published in
             two halves; a group reset (dry run) to the time between them is
             timed ten times (median and worst), and its target checked
             against where the first half ended.
  burst:     BURST_EVENTS events all due within the same second, seven
             seconds after they are published, long-polled (1,000 a poll,
             not acknowledged: the caps are raised for it) by one client:
             how late each arrived after its due time (p50, p99, last), and
             the release lateness the runtime records.
  pending:   PENDING_EVENTS events held back (due in 2099): the server's
             resident memory and store before and after, then the publish
             rate of unscheduled events (eventmesh-bench, TCP, 1 KiB, 4 x 64
             in flight, 10 s) to that topic and to a fresh one, interleaved
             twice: the ratio.

Usage: bench/time.py [--quick] [reset] [burst] [pending]
       (all three by default; binaries from $CARGO_TARGET_DIR/release)
Prints a markdown table on stdout, progress on stderr.
"""

import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

QUICK = "--quick" in sys.argv
RESET_EVENTS = 1_000_000 if QUICK else 10_000_000
BURST_EVENTS = 20_000
PENDING_EVENTS = 100_000 if QUICK else 1_000_000
TARGET = os.environ.get("CARGO_TARGET_DIR", "target")
EM = f"{TARGET}/release/eventmesh"
BENCH = f"{TARGET}/release/eventmesh-bench"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def now_ms():
    return int(time.time() * 1000)


def rfc3339(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


class Server:
    def __init__(self, *settings):
        self.dir = tempfile.mkdtemp(prefix="em-time.")
        self.http, self.admin, self.tcp = free_port(), free_port(), free_port()
        self.token = secrets.token_hex(16)
        args = [EM, "serve"]
        for kv in [f"eventmesh.admin.token={self.token}", "eventmesh.storage.type=standalone",
                   f"eventmesh.data.dir={self.dir}/data", f"eventmesh.server.http.port={self.http}",
                   f"eventmesh.server.admin.port={self.admin}", f"eventmesh.server.tcp.port={self.tcp}",
                   *settings]:
            args += ["-D", kv]
        self.log = open(f"{self.dir}/log", "w")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/admin/ready", timeout=1)
                return
            except Exception:
                time.sleep(0.1)
        raise SystemExit("the server did not come up")

    def call(self, method, path, body=None, admin=False):
        port = self.admin if admin else self.http
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
        if data is not None:
            req.add_header("content-type", "application/json")
        if admin:
            req.add_header("authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=120) as r:
            text = r.read()
            return json.loads(text) if text else None

    def publish_batch(self, topic, events):
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.http}/events/publish-batch?topic={topic}",
            data=json.dumps(events).encode(), method="POST",
            headers={"content-type": "application/cloudevents-batch+json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()

    def bench(self, *args):
        out = subprocess.run([BENCH, *args, "--server", f"http://127.0.0.1:{self.http}",
                              "--tcp-server", f"127.0.0.1:{self.tcp}", "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)

    def rss_mib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) // 1024
        return 0

    def store_mib(self):
        total = 0
        for root, _, files in os.walk(f"{self.dir}/data"):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
        return total // (1 << 20)

    def metric(self, name):
        text = urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{self.admin}/metrics",
            headers={"authorization": f"Bearer {self.token}"}), timeout=10).read().decode()
        return [line for line in text.splitlines() if line.startswith(name)]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        subprocess.run(["rm", "-rf", self.dir])


def event(i, size, **ext):
    e = {"specversion": "1.0", "id": f"e{i}", "source": "/bench", "type": "t", "data": "x" * size}
    e.update(ext)
    return e


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


rows = []


def reset_lookup():
    s = Server()
    try:
        s.call("POST", "/admin/topics", {"name": "big", "partitions": 1}, admin=True)
        s.call("POST", "/events/subscribe", {"clientId": "r", "topic": "big", "group": "g"})
        half = RESET_EVENTS // 2
        for n in (1, 2):
            log(f"reset: publishing {half:,} events ({n}/2)")
            s.bench("pub", "--topic", "big", "--size", "100", "--batch", "100", "--publishers", "4",
                    "--window", "8", "--count", str(half), "--duration", "900s")
            if n == 1:
                # The load generator's warm-up publishes too: where the
                # first half ended is the end offset now.
                first_half = s.call("GET", "/admin/topics/big", admin=True)["offsets"][0]["endOffset"]
                time.sleep(0.05)
                between = now_ms()
                time.sleep(0.05)
        took, to = [], None
        for _ in range(10):
            t = time.perf_counter()
            plan = s.call("POST", "/admin/groups/g/offsets?dryRun=true",
                          {"topic": "big", "to": rfc3339(between)}, admin=True)
            took.append((time.perf_counter() - t) * 1000)
            to = plan["partitions"][0]["to"]
        ok = "exact" if to == first_half else f"WRONG: the first half ended at {first_half:,}"
        rows.append(f"| reset to a time in a {RESET_EVENTS:,}-event partition (dry run, over HTTP) | "
                    f"median {statistics.median(took):.1f} ms, worst {max(took):.1f} ms | target {to:,} ({ok}) |")
    finally:
        s.stop()


def burst():
    s = Server("eventmesh.delivery.max.inflight=50000",
               "eventmesh.delivery.max.inflight.per.client=50000")
    arrived = {}
    try:
        s.call("POST", "/events/subscribe", {"clientId": "w", "topic": "burst", "group": "g"})
        due_second = (now_ms() // 1000 + 7) * 1000
        due = {}
        log(f"burst: {BURST_EVENTS:,} events due within one second")
        for b in range(0, BURST_EVENTS, 1000):
            batch = []
            for i in range(b, b + 1000):
                at = due_second + (i * 1000 // BURST_EVENTS)
                due[f"e{i}"] = at
                batch.append(event(i, 100, deliverat=rfc3339(at)))
            s.publish_batch("burst", batch)
        deadline = time.time() + 60
        while len(arrived) < BURST_EVENTS and time.time() < deadline:
            got = s.call("GET", "/events/poll?clientId=w&timeoutMs=1000&max=1000")
            t = now_ms()
            for d in got:
                arrived.setdefault(d["event"]["id"], t)
        late = [arrived[i] - due[i] for i in due if i in arrived]
        early = sum(1 for x in late if x < 0)
        last = max(arrived.values()) - (due_second + 1000)
        rows.append(f"| {BURST_EVENTS:,} events due within one second, long-polled by one client | "
                    f"{len(late):,} delivered; late p50 {pct(late, 0.5)} ms, p99 {pct(late, 0.99)} ms, "
                    f"the last {last} ms after the second ended | {early} early |")
        buckets = s.metric("eventmesh_scheduled_lateness_seconds_bucket")
        log("\n".join(buckets))
    finally:
        s.stop()


def pending():
    s = Server()
    try:
        rss0, disk0 = s.rss_mib(), s.store_mib()
        log(f"pending: holding back {PENDING_EVENTS:,} events")
        t = time.time()
        for b in range(0, PENDING_EVENTS, 1000):
            s.publish_batch("held", [event(i, 100, deliverat="2099-01-01T00:00:00Z")
                                     for i in range(b, b + 1000)])
        took = time.time() - t
        detail = s.call("GET", "/admin/topics/held", admin=True)
        rss1, disk1 = s.rss_mib(), s.store_mib()
        log("\n".join(s.metric("eventmesh_storage_memory_bytes")))
        rows.append(f"| {PENDING_EVENTS:,} events held back (100 B of data) | RSS {rss0} → {rss1} MiB, "
                    f"store {disk0} → {disk1} MiB; held back at {PENDING_EVENTS / took:,.0f}/s over HTTP "
                    f"batches of 1,000 | count {detail['scheduled']['count']:,} |")
        rates = {"held": [], "plain": []}
        for _ in range(2):
            for topic in ("plain", "held"):
                log(f"pending: publishing unscheduled events to {topic}")
                d = s.bench("pub", "--topic", topic, "--transport", "tcp", "--size", "1024",
                            "--publishers", "4", "--window", "64", "--duration", "10s", "--warmup", "2s")
                rates[topic].append(d["events_per_sec"])
        held, plain = statistics.median(rates["held"]), statistics.median(rates["plain"])
        rows.append(f"| publish beside {PENDING_EVENTS:,} held back vs a topic without (TCP, 1 KiB, 4 x 64) | "
                    f"{held:,.0f} vs {plain:,.0f} events/s: {held / plain:.2f}x | rounds {rates} |")
    finally:
        s.stop()


parts = [a for a in sys.argv[1:] if not a.startswith("--")] or ["reset", "burst", "pending"]
for part in parts:
    {"reset": reset_lookup, "burst": burst, "pending": pending}[part]()
print("| measurement | result | check |")
print("|---|---|---|")
for r in rows:
    print(r)

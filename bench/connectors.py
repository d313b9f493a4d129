"""Connector throughput: see bench/connectors.sh."""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BIN, N, RUNS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
TOKEN = "bench-admin-token-0123"
PG_BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait(cond, what, within=300):
    deadline = time.time() + within
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.02)
    raise SystemExit(f"timed out waiting for {what}")


def http(method, url, body=None, ctype="application/json", token=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", ctype)
    if token:
        req.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=60) as r:
        text = r.read()
        return json.loads(text) if text else None


class Mesh:
    def __init__(self, work):
        self.dir = os.path.join(work, "mesh")
        self.log = open(os.path.join(work, "mesh.log"), "w+")
        self.proc = subprocess.Popen(
            [BIN, "serve", "-D", f"eventmesh.data.dir={self.dir}",
             "-D", "eventmesh.server.http.port=0", "-D", "eventmesh.server.admin.port=0",
             "-D", "eventmesh.server.tcp.port=off", "-D", f"eventmesh.admin.token={TOKEN}",
             "-D", "eventmesh.connector.offset.store=rocksdb"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.traffic = wait(lambda: self.addr("traffic HTTP listening on "), "eventmesh")
        self.admin = wait(lambda: self.addr("admin HTTP listening on "), "eventmesh")

    def addr(self, marker):
        self.log.flush()
        with open(self.log.name) as f:
            for line in f:
                if marker in line:
                    return "http://" + line.split(marker)[1].split()[0]
        return None

    def create(self, body):
        return http("POST", self.admin + "/admin/connectors", body, token=TOKEN)

    def status(self, name):
        return http("GET", f"{self.admin}/admin/connectors/{name}", token=TOKEN)["status"]

    def publish(self, topic, n):
        """Publishes n events in batches of 1,000; events/s."""
        pad = "x" * 64
        start = time.time()
        for b in range(0, n, 1000):
            batch = [{"specversion": "1.0", "id": f"e{i}", "source": "/bench", "type": "bench",
                      "data": {"n": i, "pad": pad}} for i in range(b, min(n, b + 1000))]
            http("POST", f"{self.traffic}/events/publish-batch?topic={topic}",
                 json.dumps(batch).encode(), "application/cloudevents-batch+json")
        return n / (time.time() - start)

    def stored(self, topic):
        """Events in the topic (the standalone log's offsets count them)."""
        try:
            d = http("GET", f"{self.admin}/admin/topics/{topic}", token=TOKEN)
        except urllib.error.HTTPError:
            return 0
        return sum(p["endOffset"] for p in d["offsets"])

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)


class Postgres:
    def __init__(self, work):
        self.root = os.path.join(work, "pg")
        os.makedirs(self.root)
        shutil.chown(self.root, "postgres", "postgres")
        self.port = free_port()
        as_pg = ["runuser", "-u", "postgres", "--"]
        subprocess.run(as_pg + [f"{PG_BIN}/initdb", "-D", f"{self.root}/data", "-U", "postgres",
                                "--auth=trust"], check=True, capture_output=True)
        self.proc = subprocess.Popen(
            as_pg + [f"{PG_BIN}/postgres", "-D", f"{self.root}/data", "-p", str(self.port),
                     "-k", self.root, "-c", "listen_addresses=127.0.0.1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", str(self.port)],
                                    capture_output=True).returncode == 0, "postgres")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def sql(self, q):
        return subprocess.run(["psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p",
                               str(self.port), "-U", "postgres", "-c", q],
                              check=True, capture_output=True, text=True).stdout.strip()

    def stop(self):
        subprocess.run(["pkill", "-QUIT", "-P", str(self.proc.pid)])
        self.proc.terminate()
        self.proc.wait(30)


class Redis:
    def __init__(self, work):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--dir", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: self.cli("PING") == "PONG", "redis")
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def cli(self, *args, stdin=None):
        r = subprocess.run(["redis-cli", "-p", str(self.port), *args], capture_output=True,
                           text=True, input=stdin)
        return r.stdout.strip()

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def timed(mesh, name, body, done):
    """Creates a connector and measures until done() holds: records/s.
    done() looks where the records land (the topic, or the outside system),
    not at the connector's status, which is published once a second."""
    start = time.time()
    mesh.create(dict(body, name=name))
    wait(done, name)
    return N / (time.time() - start)


def one_run():
    work = tempfile.mkdtemp(prefix="em-bench-conn-")
    os.chmod(work, 0o755)
    pg, redis, mesh = Postgres(work), Redis(work), Mesh(work)
    out = {}
    try:
        # The ceiling: the mesh's own batched publish of the same events.
        out["publish-batch (HTTP, 1,000 a batch)"] = mesh.publish("feed", N)

        path = os.path.join(work, "in.jsonl")
        with open(path, "w") as f:
            for i in range(N):
                f.write(json.dumps({"n": i, "pad": "x" * 64}) + "\n")
        size = os.path.getsize(path)
        out["file-source"] = timed(mesh, "fin", {"kind": "file-source", "topic": "fin",
                                                 "config": {"path": path}},
                                   lambda: mesh.stored("fin") == N)

        pg.sql("CREATE TABLE outbox (id bigserial PRIMARY KEY, payload jsonb);"
               f"INSERT INTO outbox (payload) SELECT jsonb_build_object('n', g, 'pad', "
               f"repeat('x', 64)) FROM generate_series(1, {N}) g;")
        out["postgres-source"] = timed(mesh, "pin", {"kind": "postgres-source", "topic": "pin",
                                                     "config": {"url": pg.url, "table": "outbox"}},
                                       lambda: mesh.stored("pin") == N)

        cmds = "".join(f'XADD in * data "{{\\"n\\":{i}}}"\n' for i in range(N))
        redis.cli("--pipe", stdin=cmds)
        out["redis-source"] = timed(mesh, "rin", {"kind": "redis-source", "topic": "rin",
                                                  "config": {"url": redis.url, "stream": "in"}},
                                    lambda: mesh.stored("rin") == N)

        out_path = os.path.join(work, "out.jsonl")

        def lines():
            try:
                with open(out_path, "rb") as f:
                    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            except FileNotFoundError:
                return 0

        def rows():
            try:
                return int(pg.sql("SELECT count(*) FROM events"))
            except subprocess.CalledProcessError:
                return 0

        out["file-sink (fsync per batch)"] = timed(
            mesh, "fout", {"kind": "file-sink", "topic": "feed", "config": {"path": out_path}},
            lambda: lines() >= N)
        out["postgres-sink (upsert)"] = timed(
            mesh, "pout", {"kind": "postgres-sink", "topic": "feed",
                           "config": {"url": pg.url, "table": "events"}}, lambda: rows() >= N)
        out["redis-sink"] = timed(
            mesh, "rout", {"kind": "redis-sink", "topic": "feed",
                           "config": {"url": redis.url, "stream": "out"}},
            lambda: int(redis.cli("XLEN", "out") or 0) >= N)
        assert pg.sql("SELECT count(*) FROM events") == str(N)
        assert redis.cli("XLEN", "out") == str(N)
    finally:
        mesh.stop()
        redis.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


runs = [one_run() for _ in range(RUNS)]
print(f"{N} records, median of {RUNS} run(s):")
for key in runs[0]:
    values = [r[key] for r in runs]
    print(f"  {key:38s} {statistics.median(values):10.0f} /s   (runs: "
          + ", ".join(f"{v:.0f}" for v in values) + ")")

#!/usr/bin/python3
"""The coordinator's web pages and /metrics, seen from outside.

A real parallax-coordinator (with --http and a read-only token) and a real
parallax-agent run a real small job: the built-in ctr model on synthetic data,
two trainer ranks and two PS shards, asynchronous. Then:

- /metrics is parsed by the Prometheus client library's own parser
  (Debian python3-prometheus-client) and checked against the job's figures
  as `parallax status --json` reports them, with the job's tasks stopped
  (SIGSTOP) so that both read the same points;
- headless Chromium (Debian chromium) loads the jobs list and the job page,
  and the DOM it built is checked (the job listed, the plan's rows, curves
  with points); a screenshot of the job page is saved (docs/OPERATIONS.md
  shows it);
- bad requests (unknown job, wrong token, a huge query, a write) get 4xx and
  the coordinator keeps serving;
- once the job is cancelled its series leave /metrics.

Run by ctest (labels python, integration):
    /usr/bin/python3 tests/web/web_test.py --bin-dir build/bin [--screenshot FILE]
"""

import argparse
import html.parser
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:  # a failure, not a skip: the test must run where it is listed
    sys.exit("web_test: python3-prometheus-client is missing; run scripts/install-deps --test")

ARGS = None
TOKEN = "read-only-web-token"
CHROMIUM = "/usr/bin/chromium"


def wait_for(what, predicate, timeout_s=60, interval_s=0.1):
    """Polls predicate() until it returns a true value; fails after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout_s, what))


class Dom(html.parser.HTMLParser):
    """The parts of a page the checks look at: tables by id (rows of cell
    texts), the polylines of each svg by id, and every link."""

    def __init__(self, text):
        super().__init__()
        self.tables, self.curves, self.links = {}, {}, []
        self._table = self._row = self._cell = self._svg = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(a.get("id", ""), [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = ""
        elif tag == "a" and "href" in a:
            self.links.append(a["href"])
        elif tag == "svg":
            self._svg = a.get("id", "")
        elif tag == "polyline" and self._svg is not None:
            self.curves.setdefault(self._svg, []).append(a.get("points", ""))

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell.strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "svg":
            self._svg = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


class WebTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(CHROMIUM, os.X_OK):
            raise AssertionError("%s is missing; run scripts/install-deps --test" % CHROMIUM)
        cls.tmp = tempfile.TemporaryDirectory(prefix="parallax-web-test-")
        cls.dir = cls.tmp.name
        cls.marker = "PX_WEB_TEST=%d" % os.getpid()
        cls.children = []
        try:
            cls.start_cluster()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for pid in cls.task_pids():
            os.kill(pid, signal.SIGCONT)
        for child in reversed(cls.children):
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        for pid in cls.task_pids():
            os.kill(pid, signal.SIGKILL)
        cls.tmp.cleanup()

    @classmethod
    def path(cls, name):
        return os.path.join(cls.dir, name)

    @classmethod
    def spawn(cls, argv, log):
        env = dict(os.environ)
        env[cls.marker.split("=")[0]] = cls.marker.split("=")[1]
        with open(cls.path(log), "wb") as out:
            child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                     cwd=cls.dir)
        cls.children.append(child)
        return child

    @classmethod
    def start_cluster(cls):
        bin_dir = ARGS.bin_dir
        subprocess.run([os.path.join(bin_dir, "parallax-data"), "synthetic-ctr", "--train",
                        "20000", "--heldout", "2000", "--table-sizes"] + ["300"] * 26 +
                       [cls.path("data")], check=True, capture_output=True, timeout=120)
        with open(cls.path("token"), "w") as f:
            f.write(TOKEN + "\n")
        os.chmod(cls.path("token"), 0o600)
        cls.spawn([os.path.join(bin_dir, "parallax-coordinator"), "--listen", "127.0.0.1:0",
                   "--port-file", cls.path("coordinator.port"), "--db", cls.path("state.db"),
                   "--http", "127.0.0.1:0", "--http-port-file", cls.path("http.port"),
                   "--http-token-file", cls.path("token")], "coordinator.log")
        cls.address = "127.0.0.1:" + wait_for(
            "the coordinator's port", lambda: cls.read(cls.path("coordinator.port")))
        cls.http_port = int(wait_for("the web port", lambda: cls.read(cls.path("http.port"))))
        cls.spawn([os.path.join(bin_dir, "parallax-agent"), "--coordinator", cls.address,
                   "--name", "web-agent", "--workdir", cls.path("agent"), "--slots", "4",
                   "--allow-exec", bin_dir], "agent.log")
        with open(cls.path("job.toml"), "w") as f:
            f.write(JOB)
        out = cls.cli(["submit", cls.path("job.toml")])
        cls.job = int(out.strip().splitlines()[-1])
        # Running, with metric points and both shards' first reports.
        wait_for("the job to run", lambda: cls.status()["state"] == "RUNNING"
                 and cls.status()["step"] >= 200, timeout_s=120)
        # Shards report every 2 s: wait for a report of each from after training began.
        def shards_with_rows():
            held = [s for f in text_string_to_metric_families(cls.metrics_text())
                    if f.name == "parallax_ps_rows_held" for s in f.samples
                    if s.labels["job_id"] == str(cls.job) and s.value > 0]
            return len(held) == 2
        wait_for("both PS shards' counters", shards_with_rows, timeout_s=60)

    @staticmethod
    def read(path):
        try:
            with open(path) as f:
                return f.read().strip()
        except FileNotFoundError:
            return ""

    @classmethod
    def cli(cls, args):
        r = subprocess.run([os.path.join(ARGS.bin_dir, "parallax"), "--coordinator",
                            cls.address] + args, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("parallax %s failed: %s" % (" ".join(args), r.stderr))
        return r.stdout

    @classmethod
    def status(cls):
        return json.loads(cls.cli(["status", str(cls.job), "--json"]))["jobs"][0]

    @classmethod
    def get(cls, path, token=TOKEN, method="GET"):
        """(status, body) of a request to the web port."""
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (cls.http_port, path),
                                         method=method)
        if token is not None:
            request.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(errors="replace")

    @classmethod
    def metrics_text(cls):
        status, body = cls.get("/metrics")
        if status != 200:
            raise AssertionError("/metrics answered %d: %s" % (status, body))
        return body

    @classmethod
    def task_pids(cls, roles_only=False):
        """Processes with our marker that are not our children: the agent's
        task supervisors and the tasks; with roles_only, the tasks (trainer
        ranks and PS shards, which have a PARALLAX_ROLE)."""
        ours = {c.pid for c in cls.children}
        pids = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in ours or int(entry) == os.getpid():
                continue
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    env = f.read().split(b"\0")
                if cls.marker.encode() in env and (
                        not roles_only or any(v.startswith(b"PARALLAX_ROLE=") for v in env)):
                    pids.append(int(entry))
            except OSError:
                pass
        return pids

    def chromium(self, *args):
        """Runs headless Chromium with a fresh profile; returns its stdout."""
        profile = tempfile.mkdtemp(dir=self.dir, prefix="chromium-")
        argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run", "--user-data-dir=" + profile] + list(args)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=180)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return r.stdout

    def url(self, path):
        # A browser sends the token as the password of HTTP Basic.
        return "http://viewer:%s@127.0.0.1:%d%s" % (TOKEN, self.http_port, path)

    def test_1_metrics_parse_and_match_the_jobs_figures(self):
        # Freeze the job so that /metrics and `parallax status` see the same points.
        pids = self.task_pids(roles_only=True)
        self.assertEqual(len(pids), 4, "expected 2 trainers and 2 shards, found %s" % pids)
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            def settled():
                a, b = self.status(), (time.sleep(0.5), self.status())[1]
                return b if a == b else None
            status = wait_for("the stopped job's figures to settle", settled, timeout_s=30)
            text = self.metrics_text()
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

        families = {f.name: f for f in text_string_to_metric_families(text)}
        job = {"job_id": str(self.job), "job_name": "web-ctr"}

        def value(sample, **labels):
            # The parser names a counter's family without "_total"; samples keep it.
            found = [s.value for f in families.values() for s in f.samples
                     if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
            self.assertEqual(len(found), 1, "%s %s in\n%s" % (sample, labels, text))
            return found[0]

        self.assertEqual(families["parallax_jobs"].type, "gauge")
        self.assertEqual(families["parallax_ps_requests"].type, "counter")
        self.assertEqual(value("parallax_jobs", state="running"), 1)
        self.assertEqual(value("parallax_agents", state="alive"), 1)
        self.assertEqual(families["parallax_coordinator_rpc_duration_seconds"].type, "histogram")
        heartbeats = [s for s in families["parallax_coordinator_rpc_duration_seconds"].samples
                      if s.name.endswith("_count") and s.labels["method"] == "Heartbeat"]
        self.assertGreater(heartbeats[0].value, 0)

        points = status["metrics"]
        self.assertEqual(len(points), 2)
        self.assertEqual(value("parallax_job_step", **job), status["step"])
        self.assertAlmostEqual(value("parallax_job_loss", **job),
                               sum(p["loss"] for p in points) / 2, places=9)
        self.assertAlmostEqual(value("parallax_job_samples_per_second", **job),
                               sum(p["throughput"] for p in points), places=6)
        for path, key in (("ps_pull", "ps_pull_recv_bytes"), ("ps_push", "ps_push_sent_bytes")):
            direction = "received" if key.endswith("recv_bytes") else "sent"
            expected = sum(p["values"][key] for p in points) / 2
            self.assertGreater(expected, 0)
            self.assertAlmostEqual(value("parallax_job_step_bytes", path=path,
                                         direction=direction, **job), expected, places=6)
        self.assertAlmostEqual(value("parallax_job_step_phase_seconds", phase="compute", **job),
                               sum(p["values"]["compute_ms"] for p in points) / 2 / 1000, places=9)
        self.assertGreater(value("parallax_job_steps_per_second", **job), 0)

        self.assertEqual(families["parallax_ps_push_staleness_steps"].type, "histogram")
        for shard in ("0", "1"):
            labels = {"job_id": str(self.job), "shard": shard}
            self.assertGreater(value("parallax_ps_rows_held", **labels), 0)
            self.assertGreater(value("parallax_ps_rows_pulled_total", **labels), 0)
            pushes = sum(value("parallax_ps_requests_total", op=op, **labels)
                         for op in ("push", "push_pull"))
            self.assertGreater(pushes, 0)
            counted = [s.value for s in families["parallax_ps_push_staleness_steps"].samples
                       if s.name.endswith("_count") and s.labels["shard"] == shard
                       and s.labels["job_id"] == str(self.job)]
            # Every async push is counted once per partition it touched.
            self.assertGreater(counted[0], 0)

    def test_2_browser_lists_the_job(self):
        dom = Dom(self.chromium("--dump-dom", self.url("/")))
        rows = dom.tables["jobs"]
        self.assertEqual(rows[0][:3], ["id", "name", "state"])
        mine = [r for r in rows[1:] if r[0] == str(self.job)]
        self.assertEqual(len(mine), 1, rows)
        self.assertEqual(mine[0][1], "web-ctr")
        self.assertEqual(mine[0][2], "RUNNING")
        self.assertIn("/jobs/%d" % self.job, dom.links)
        self.assertEqual([r[0] for r in dom.tables["agents"][1:]], ["web-agent"])

    def test_3_browser_shows_the_job_page_and_saves_a_screenshot(self):
        dom = Dom(self.chromium("--dump-dom", self.url("/jobs/%d" % self.job)))
        # The plan: a row per variable of the stored plan, each with its path.
        plan_lines = self.cli(["status", str(self.job)]).split("plan of attempt")[1]
        variables = [line.split()[0] for line in plan_lines.splitlines()[2:] if line.strip()
                     and line.startswith("ctr/")]
        rows = dom.tables["plan"][1:]
        self.assertEqual([r[0] for r in rows], variables)
        self.assertTrue(all(r[3] == "ps" for r in rows), rows)
        for chart in ("loss-chart", "throughput-chart"):
            points = dom.curves[chart][0].split()
            self.assertGreater(len(points), 10, chart)
        tasks = sorted(r[0] for r in dom.tables["tasks"][1:])
        self.assertEqual(tasks, ["ps/0", "ps/1", "trainer/0", "trainer/1"])
        self.assertEqual(len(dom.tables["shards"]) - 1, 2)
        self.assertTrue(any(r[1] == "submitted" for r in dom.tables["events"][1:]))

        shot = ARGS.screenshot or self.path("job-page.png")
        os.makedirs(os.path.dirname(os.path.abspath(shot)), exist_ok=True)
        self.chromium("--window-size=1280,1500", "--hide-scrollbars", "--screenshot=" + shot,
                      self.url("/jobs/%d" % self.job))
        with open(shot, "rb") as f:
            png = f.read()
        self.assertEqual(png[:8], b"\x89PNG\r\n\x1a\n")
        self.assertGreater(len(png), 20000)

    def test_4_bad_requests_are_4xx_and_serving_goes_on(self):
        cases = [
            ("/jobs/%d" % (self.job + 100), TOKEN, "GET", 404),
            ("/jobs/not-a-number", TOKEN, "GET", 400),
            ("/jobs/%d/logs/trainer/99" % self.job, TOKEN, "GET", 404),
            ("/metrics", "wrong-token", "GET", 401),
            ("/metrics", None, "GET", 401),
            ("/?q=" + "x" * 100000, TOKEN, "GET", 414),
            ("/jobs", TOKEN, "POST", 405),
        ]
        for path, token, method, expected in cases:
            status, _ = self.get(path, token=token, method=method)
            self.assertEqual(status, expected, (path[:40], token, method))
        status, body = self.get("/jobs/%d/logs/trainer/0" % self.job)
        self.assertEqual(status, 200)
        self.assertIn("rank 0", body)
        self.assertEqual(self.get("/")[0], 200)
        self.assertIsNone(self.children[0].poll(), "the coordinator exited")

    def test_5_series_of_an_ended_job_leave(self):
        self.cli(["cancel", str(self.job)])
        wait_for("the job to end", lambda: self.status()["state"] == "CANCELLED", timeout_s=60)
        text = self.metrics_text()
        self.assertNotIn('job_id="%d"' % self.job, text)
        families = {f.name: f for f in text_string_to_metric_families(text)}
        cancelled = [s.value for s in families["parallax_jobs"].samples
                     if s.labels["state"] == "cancelled"]
        self.assertEqual(cancelled, [1])


JOB = """
[job]
name = "web-ctr"
workers = 2
arch = "ps"
consistency = "async"

[trainer]
model = "ctr"
steps = 10000000
batch_size = 128
metrics_every = 10

[model]
data = "data/train.tsv"
tables = [%s]
dim = 4
bottom = [8]
top = [8]
eval_every = 0

[optimizer.dense]
type = "sgd"
lr = 0.05

[optimizer.sparse]
type = "adagrad"
lr = 0.05

[ps]
shards = 2
""" % ", ".join(["300"] * 26)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    parser.add_argument("--screenshot", help="where to save the job page's screenshot")
    ARGS, rest = parser.parse_known_args()
    ARGS.bin_dir = os.path.abspath(ARGS.bin_dir)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

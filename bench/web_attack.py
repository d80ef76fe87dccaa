#!/usr/bin/env python3
"""web_attack: how long a scrape of the coordinator's /metrics takes while
clients without the token attack its web server.

Each round starts a fresh parallax-coordinator with --http on loopback and a
token, scrapes /metrics (with the token) every --period-ms for --quiet-s
seconds with nobody else connected (the baseline), then opens --connections
attacking connections and scrapes for --attack-s seconds while they are held:

  trickle  half a request line ("GET /metrics HTTP/1.1 ..."), then one byte
           every --trickle-s seconds on each connection, never finishing the
           headers; a connection the server cuts is opened again at once
  idle     connect and send nothing, opened again when cut

Prints one JSON line per round and attack (median, p99 and max answer time of
the scrapes, failures, connections held, what the server's /metrics counted
as cut), then one summary line per statistic over the rounds: the median of
the rounds' medians and p99s, the largest of their maxima, and the ratio
attack / baseline measured side by side.

The coordinator runs with its default web connection cap (a quarter of
--max-connections, at most 1024); --coordinator-arg passes it other flags.
--bin-dir runs another build's binaries (an older one, to compare).

  bench/web_attack.py [--rounds 5] [--connections 1000] [--attack trickle|idle]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKEN = "web-attack-bench-token-0123456789"


def percentile(values, q):
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Attack(threading.Thread):
    """Holds `count` connections to 127.0.0.1:port, reopening those cut."""

    def __init__(self, port, count, kind, trickle_s):
        super().__init__(daemon=True)
        self.port, self.count, self.kind, self.trickle_s = port, count, kind, trickle_s
        self.stop = threading.Event()
        self.socks = []
        self.cut = 0
        self.opened = 0

    def open_one(self):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", self.port))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            return
        self.opened += 1
        if self.kind == "trickle":
            try:
                s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-A: ")
            except OSError:
                pass
        self.socks.append(s)

    def run(self):
        for _ in range(self.count):
            if self.stop.is_set():
                return
            self.open_one()
        while not self.stop.wait(self.trickle_s):
            kept, lost = [], 0
            for s in self.socks:
                gone = False
                try:
                    data = s.recv(4096)
                    gone = data == b""  # the server closed it (a reply, or nothing)
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
                if not gone and self.kind == "trickle":
                    try:
                        s.send(b"a")
                    except BlockingIOError:
                        pass
                    except OSError:
                        gone = True
                if gone:
                    s.close()
                    lost += 1
                else:
                    kept.append(s)
            self.socks = kept
            self.cut += lost
            for _ in range(lost):
                self.open_one()

    def close(self):
        self.stop.set()
        self.join()
        for s in self.socks:
            s.close()


def scrape(port):
    """The answer time of GET /metrics with the token, in ms (None: failed)."""
    start = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/metrics", headers={"Authorization": "Bearer " + TOKEN})
        r = c.getresponse()
        body = r.read()
        c.close()
        if r.status != 200:
            return None, b""
        return (time.monotonic() - start) * 1000, body
    except OSError:
        return None, b""


def scrape_for(port, seconds, period_ms):
    times, failed, last = [], 0, b""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        due = time.monotonic() + period_ms / 1000
        ms, body = scrape(port)
        if ms is None:
            failed += 1
        else:
            times.append(ms)
            last = body
        time.sleep(max(0, due - time.monotonic()))
    return times, failed, last


def metric(body, name):
    for line in body.decode(errors="replace").splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def start_coordinator(bin_dir, work, extra):
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write(TOKEN + "\n")
    os.chmod(token, 0o600)
    port_file = os.path.join(work, "http.port")
    log = open(os.path.join(work, "coordinator.log"), "w")
    cmd = [os.path.join(bin_dir, "parallax-coordinator"), "--listen", "127.0.0.1:0",
           "--db", os.path.join(work, "state.db"), "--http", "127.0.0.1:0",
           "--http-token-file", token, "--http-port-file", port_file] + list(extra)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(400):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, int(open(port_file).read())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit("web_attack: the coordinator did not start; see " + log.name)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--attack", choices=["trickle", "idle"], default="trickle")
    p.add_argument("--trickle-s", type=float, default=2.0)
    p.add_argument("--quiet-s", type=float, default=5.0)
    p.add_argument("--attack-s", type=float, default=15.0)
    p.add_argument("--period-ms", type=int, default=200)
    p.add_argument("--coordinator-arg", action="append", default=[],
                   help="a flag for parallax-coordinator (repeat it), e.g. "
                        "--coordinator-arg=--http-max-connections=64")
    args = p.parse_args()
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    params = {"attack": args.attack, "connections": args.connections,
              "trickle_s": args.trickle_s, "period_ms": args.period_ms}
    rounds = []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="parallax-web-attack-") as work:
            proc, port = start_coordinator(args.bin_dir, work, args.coordinator_arg)
            try:
                quiet, quiet_failed, _ = scrape_for(port, args.quiet_s, args.period_ms)
                attack = Attack(port, args.connections, args.attack, args.trickle_s)
                attack.start()
                time.sleep(1.0)  # the connections open
                held = len(attack.socks)
                under, under_failed, last = scrape_for(port, args.attack_s, args.period_ms)
                held = max(held, len(attack.socks))
                attack.close()
                ms, final = scrape(port)
                body = final or last
                line = dict(bench="web_attack", impl="parallax", round=r, unit="ms",
                            quiet_median=statistics.median(quiet) if quiet else None,
                            median=statistics.median(under) if under else None,
                            p99=percentile(under, 0.99), max=max(under) if under else None,
                            scrapes=len(under), failed=under_failed, quiet_failed=quiet_failed,
                            held=held, reopened=attack.cut,
                            cut_deadline=metric(body, 'parallax_http_connections_cut_total{reason="deadline"}'),
                            cut_cap=metric(body, 'parallax_http_connections_cut_total{reason="cap"}'),
                            **params)
                print(json.dumps(line), flush=True)
                rounds.append(line)
            finally:
                proc.terminate()
                proc.wait(timeout=30)

    def summary(metric_name, stat, values, unit="ms", over=statistics.median):
        """One line: `over` (the median, or the max) of the rounds' values."""
        values = [v for v in values if v is not None]
        if not values:
            return
        print(json.dumps(dict(bench="web_attack", impl="parallax", metric=metric_name, unit=unit,
                              stat=stat, runs=len(values), value=over(values), **params)),
              flush=True)

    summary("scrape_ms_under_attack", "median", [x["median"] for x in rounds])
    summary("scrape_ms_under_attack", "p99", [x["p99"] for x in rounds])
    summary("scrape_ms_under_attack", "max", [x["max"] for x in rounds], over=max)
    summary("scrape_ms_quiet", "median", [x["quiet_median"] for x in rounds])
    summary("attack_over_quiet", "median",
            [x["median"] / x["quiet_median"] for x in rounds
             if x["median"] and x["quiet_median"]], unit="ratio")
    print(json.dumps(dict(bench="web_attack", impl="parallax", metric="scrapes_failed",
                          unit="scrapes", stat="total", runs=len(rounds),
                          value=sum(x["failed"] for x in rounds), **params)), flush=True)


if __name__ == "__main__":
    main()

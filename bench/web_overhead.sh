#!/usr/bin/env bash
# web_overhead: what serving the web pages and /metrics costs the
# coordinator's heartbeats. bench/coordinator_load starts a
# parallax-coordinator with --http and a token (--coordinator-arg) and drives
# 500 simulated agents heartbeating every second, long-polling and reporting
# their tasks (and one client submitting a job a second); a scraper fetches
# /metrics, the jobs list and a job page once a second, like a Prometheus
# scrape plus an open browser tab.
#
# Each round is three runs, each on a fresh coordinator and database:
# without the scraper (A), with it (B), without again (A'). A' against A is
# the A/A control: the noise of the machine. Prints the runs' JSON lines
# (coordinator_load's heartbeat line plus "mode" and "round"), then one
# summary line per statistic: median(B) / median(A and A'), and the A/A
# control median(A') / median(A).
#
# --rt runs the coordinator, the load and the scraper SCHED_FIFO (chrt -f):
# on a machine shared with builds, what the other processes do then hardly
# reaches the measurement (the kernel still leaves them 5% of each second).
#
#   flock /work/bench.lock bench/web_overhead.sh [--rounds 5] [--agents 500] [--duration-s 20] [--rt]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/bench/lib.sh"
px_build_dir
px_require_bins web_overhead parallax-coordinator coordinator_load

rounds=5 agents=500 duration=20 rt=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rt) rt=1; shift ;;
    --rounds) rounds="$2"; shift 2 ;;
    --agents) agents="$2"; shift 2 ;;
    --duration-s) duration="$2"; shift 2 ;;
    *) echo "usage: bench/web_overhead.sh [--rounds N] [--agents N] [--duration-s S] [--rt]" >&2; exit 2 ;;
  esac
done

prio=()
[[ "$rt" == 1 ]] && prio=(chrt -f 10)
work="$(mktemp -d /tmp/parallax-web-overhead-XXXXXX)"
load_pid=""
scraper_pid=""
cleanup() {
  [[ -n "$scraper_pid" ]] && kill "$scraper_pid" 2>/dev/null || true
  [[ -n "$load_pid" ]] && kill -- -"$load_pid" 2>/dev/null && wait "$load_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
echo "web-overhead-token" > "$work/token" && chmod 600 "$work/token"

# Fetches the three pages once a second until killed; counts what it got.
scrape() {
  local base="$1" ok=0 failed=0 code
  trap 'echo "{\"bench\":\"web_overhead\",\"scrapes_ok\":$ok,\"scrapes_failed\":$failed}" >&2; exit 0' TERM
  while true; do
    for path in /metrics / /jobs/1; do
      code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 \
                  -H "Authorization: Bearer web-overhead-token" "$base$path" || true)
      if [[ "$code" == 200 ]]; then ok=$((ok + 1)); else failed=$((failed + 1)); fi
    done
    sleep 1 &
    wait $!
  done
}

# run MODE ROUND: one coordinator_load run (it starts the coordinator, with
# the web server, on a fresh database: no preloaded queue); prints its
# heartbeat line. In a session of its own, so that cleanup ends the
# coordinator with it.
run() {
  local mode="$1" round="$2" dir="$work/run"
  rm -rf "$dir" && mkdir -p "$dir"
  setsid "${prio[@]}" "$build_dir/bin/coordinator_load" --dir "$dir" --preload 0 \
      --agents "$agents" --clients 1 --client-interval-ms 1000 --duration-s "$duration" \
      --coordinator-arg=--http --coordinator-arg=127.0.0.1:0 \
      --coordinator-arg=--http-port-file --coordinator-arg="$dir/http.port" \
      --coordinator-arg=--http-token-file --coordinator-arg="$work/token" \
      > "$dir/load.json" 2> "$dir/load.log" &
  load_pid=$!
  for _ in $(seq 600); do
    [[ -s "$dir/http.port" ]] || ! kill -0 "$load_pid" 2>/dev/null && break
    sleep 0.05
  done
  [[ -s "$dir/http.port" ]] || { echo "web_overhead: coordinator did not start" >&2; cat "$dir/load.log" >&2; exit 1; }
  if [[ "$mode" == scrape ]]; then
    "${prio[@]}" bash -c "$(declare -f scrape); scrape \"\$0\"" \
        "http://127.0.0.1:$(cat "$dir/http.port")" 2>>"$work/scrapes" &
    scraper_pid=$!
  fi
  wait "$load_pid" || { echo "web_overhead: coordinator_load failed" >&2; cat "$dir/load.json" "$dir/load.log" >&2; exit 1; }
  load_pid=""
  if [[ -n "$scraper_pid" ]]; then
    kill -TERM "$scraper_pid"; wait "$scraper_pid" || true; scraper_pid=""
    tail -1 "$work/scrapes" >&2
    # A run whose scraper got no page measured nothing.
    grep -q '"scrapes_ok":[1-9]' <(tail -1 "$work/scrapes") ||
      { echo "web_overhead: the scraper got no page (is curl installed?)" >&2; exit 1; }
  fi
  grep '"call":"heartbeat"' "$dir/load.json" |
    sed -e "s/\"round\":1\([,}]\)/\"round\":$round\1/" \
        -e "s/^{/{\"mode\":\"$mode\",\"loadavg\":\"$(cut -d' ' -f1-3 /proc/loadavg)\",/" \
    > "$dir/line.json"
  cat "$dir/line.json" >> "$work/runs.json"
  cat "$dir/line.json"
}

px_event web_overhead start
for round in $(seq "$rounds"); do
  run none "$round"
  run scrape "$round"
  run none "$round"
done
python3 - "$work/runs.json" "$agents" "$duration" "$rt" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
first = [r for i, r in enumerate(runs) if i % 3 == 0]   # A
scrape = [r for i, r in enumerate(runs) if i % 3 == 1]  # B
second = [r for i, r in enumerate(runs) if i % 3 == 2]  # A'
for stat in ("p99_ms", "p50_ms"):
    med = lambda rs: statistics.median(r[stat] for r in rs)
    for name, value in (("scrape_over_none", med(scrape) / med(first + second)),
                        ("aa_control", med(second) / med(first))):
        print(json.dumps({"bench": "web_overhead", "metric": "heartbeat_" + stat + "_ratio",
                          "compare": name, "unit": "ratio", "stat": "ratio of medians",
                          "runs": len(scrape), "value": round(value, 3),
                          "none_ms": [r[stat] for r in first + second],
                          "scrape_ms": [r[stat] for r in scrape],
                          "agents": int(sys.argv[2]), "duration_s": int(sys.argv[3]),
                          "realtime": sys.argv[4] == "1"}))
EOF
px_event web_overhead end

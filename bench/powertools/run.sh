#!/usr/bin/env bash
# Side by side on one local Redis (issue 3, item 11): the same workload (N distinct first
# calls, then N replays of the same keys, sequential, one process each) through
#   - AWS Lambda Powertools for Python's `idempotent_function` + `RedisCachePersistenceLayer`
#     (aws-lambda-powertools 3.23.0 from PyPI, in a venv under target/), and
#   - idem's Redis store through the `#[idempotent]` attribute (examples/redis_workload.rs).
# Prints one summary table and one JSON line; exits non-zero on any failure.
#
# Needs PyPI (pip) and a Redis server; not run by .ci/run.
# Usage: bench/powertools/run.sh [N] [ROUNDS]   (env: REDIS_HOST, REDIS_PORT)
# N defaults to 2000 calls per phase; ROUNDS (default 7) alternates the two sides that many
# times (Powertools, idem, Powertools, idem, ...) and reports, per side and phase, the median
# and the best (minimum) of the rounds' wall time per call, and the ratio of each: on a
# shared machine a burst of load only ever adds time, so the best round is the least
# disturbed estimate, and the median shows what a loaded machine gives.
# Each side uses its own fresh key prefix and deletes it; `CONFIG RESETSTAT` is sent before
# each phase (it resets the server's statistics, nothing else).
set -euo pipefail

N="${1:-2000}"
ROUNDS="${2:-7}"
HOST="${REDIS_HOST:-127.0.0.1}"
PORT="${REDIS_PORT:-6379}"
POWERTOOLS_VERSION="3.23.0"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="$ROOT/target/powertools-venv"
cd "$ROOT"

if ! "$VENV/bin/python" -c "import aws_lambda_powertools, redis, boto3" 2>/dev/null \
   || [ "$("$VENV/bin/python" -c 'import aws_lambda_powertools.shared.version as v; print(v.VERSION)')" != "$POWERTOOLS_VERSION" ]; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "aws-lambda-powertools[redis,aws-sdk]==$POWERTOOLS_VERSION"
fi

cargo build --quiet --release --features redis --example redis_workload
IDEM_BIN="$ROOT/target/release/examples/redis_workload"

OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

for r in $(seq 1 "$ROUNDS"); do
  "$VENV/bin/python" bench/powertools/workload.py --host "$HOST" --port "$PORT" --n "$N" >"$OUT/powertools.$r.json"
  "$IDEM_BIN" --url "redis://$HOST:$PORT" --n "$N" >"$OUT/idem.$r.json"
done

"$VENV/bin/python" - "$OUT" "$ROUNDS" "$POWERTOOLS_VERSION" <<'PY'
import json, os, statistics, sys

out, rounds, version = sys.argv[1], int(sys.argv[2]), sys.argv[3]
pts = [json.load(open(os.path.join(out, f"powertools.{r}.json"))) for r in range(1, rounds + 1)]
idems = [json.load(open(os.path.join(out, f"idem.{r}.json"))) for r in range(1, rounds + 1)]

def median_run(runs):
    """The runs' phases with each per-call time replaced by the median over the rounds.
    Command counts come from the round that counted the fewest commands: the server is
    shared, and other clients' commands can only add to `INFO commandstats`."""
    merged = json.loads(json.dumps(runs[0]))
    for name in ("first", "replay"):
        times = [r["phases"][name]["us_per_call"] for r in runs]
        merged["phases"][name]["us_per_call"] = statistics.median(times)
        merged["phases"][name]["us_per_call_best"] = min(times)
        merged["phases"][name]["us_per_call_rounds"] = [round(t, 1) for t in times]
        cleanest = min(runs, key=lambda r: sum(r["phases"][name]["commandstats"].values()))
        for field, value in cleanest["phases"][name].items():
            if field not in ("us_per_call", "us_per_call_best"):
                merged["phases"][name][field] = value
    return merged

failures = []
pt, idem = median_run(pts), median_run(idems)
script_cmds = {"evalsha", "eval", "script|load"}
# What each side sends (Powertools: SET NX, SET, GET; idem: EVALSHA) and, for idem, what its
# scripts run inside the server. Anything else in a phase came from another client.
expected = {
    "powertools": {"set", "get"},
    "idem": script_cmds | {"hget", "exists", "hmget", "del", "hset", "pexpire", "hdel"},
}
for side in (pt, idem):
    for name in ("first", "replay"):
        foreign = set(side["phases"][name]["commandstats"]) - expected[side["impl"]]
        if foreign:
            failures.append(f"{side['impl']} {name}: commands from other clients in every round: "
                            f"{sorted(foreign)}; rerun when the server is quiet")

def client_commands(phase):
    """Commands sent by clients: with Lua scripts, commandstats also counts the commands a
    script runs inside the server; the idem workload sends only EVALSHA (and SCRIPT LOAD
    after NOSCRIPT), so its client commands are those. Powertools sends no script."""
    stats = phase["commandstats"]
    if "evalsha" in stats or "eval" in stats:
        return sum(n for c, n in stats.items() if c in script_cmds)
    return sum(stats.values())

rows, summary = [], {"n": pt["n"], "rounds": rounds, "powertools_version": version,
                     "loadavg_after": os.getloadavg()}
for name in ("first", "replay"):
    p, i = pt["phases"][name], idem["phases"][name]
    n = pt["n"]
    p_rt = client_commands(p) / n
    i_rt_stats = client_commands(i) / n
    i_rt_counter = i["round_trips_per_call_counter"]
    if abs(i_rt_stats - i_rt_counter) > 1e-9:
        failures.append(f"{name}: idem's counter ({i_rt_counter}) and INFO commandstats ({i_rt_stats}) disagree "
                        "(other clients on this Redis during the run?)")
    ratio = p["us_per_call"] / i["us_per_call"]
    best_ratio = p["us_per_call_best"] / i["us_per_call_best"]
    summary[name] = {
        "powertools_us_per_call": round(p["us_per_call"], 2),
        "idem_us_per_call": round(i["us_per_call"], 2),
        "powertools_us_per_call_best": round(p["us_per_call_best"], 2),
        "idem_us_per_call_best": round(i["us_per_call_best"], 2),
        "ratio_powertools_over_idem_best": round(best_ratio, 2),
        "powertools_us_per_call_rounds": p["us_per_call_rounds"],
        "idem_us_per_call_rounds": i["us_per_call_rounds"],
        "ratio_powertools_over_idem": round(ratio, 2),
        "powertools_round_trips_per_call": p_rt,
        "idem_round_trips_per_call_commandstats": i_rt_stats,
        "idem_round_trips_per_call_counter": i_rt_counter,
        "powertools_commands_executed_per_call": p["commandstats_calls_per_call"],
        "idem_commands_executed_per_call_incl_inside_scripts": i["commandstats_calls_per_call"],
        "powertools_commandstats": p["commandstats"],
        "idem_commandstats": i["commandstats"],
    }
    rows.append((name, p["us_per_call"], i["us_per_call"], ratio, p["us_per_call_best"],
                 i["us_per_call_best"], best_ratio, p_rt, i_rt_stats, i_rt_counter))

print(f"N = {pt['n']} sequential calls per phase, median of {rounds} alternated rounds; "
      f"aws-lambda-powertools {version}; one local Redis; load average after: {os.getloadavg()[0]:.2f}")
print(f"{'phase':<7} {'PT µs median':>13} {'idem µs median':>15} {'ratio':>7} "
      f"{'PT µs best':>11} {'idem µs best':>13} {'ratio':>7} "
      f"{'PT round trips':>15} {'idem RT (stats)':>16} {'idem RT (counter)':>18}")
for name, p_us, i_us, ratio, p_b, i_b, b_ratio, p_rt, i_rt, i_c in rows:
    print(f"{name:<7} {p_us:>13.1f} {i_us:>15.1f} {ratio:>6.2f}× {p_b:>11.1f} {i_b:>13.1f} {b_ratio:>6.2f}× "
          f"{p_rt:>15.2f} {i_rt:>16.2f} {i_c:>18.2f}")
print(json.dumps(summary))
for f in failures:
    print("FAILED: " + f, file=sys.stderr)
sys.exit(1 if failures else 0)
PY

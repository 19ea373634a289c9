#!/usr/bin/env bash
# What the shell examples of README.md and docs/guide/ say a command prints, checked by
# running the command. (The Rust code blocks are doctests of the idem-agent crate; the
# counts of the main job are .ci/check-replay.sh's, the example payment's a step of .ci/run.)
# Uses the binaries earlier CI steps built when they are there: the main job as
# .ci/check-replay.sh last builds it, and the `idem` command of `cargo test -p idem-cli`.
set -euo pipefail
cd "$(dirname "$0")/.."
# The README runs the main job in release; IDEM_CI_PROFILE=dev (what .ci/run sets) checks the
# same output with the debug build the tests already made, instead of building every
# dependency again with optimizations.
profile="${IDEM_CI_PROFILE:-release}"
profile_dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
target="${CARGO_TARGET_DIR:-target}"

fail() { echo "check-docs: $*" >&2; exit 1; }

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The main job, built as .ci/check-replay.sh last builds it (its counts do not depend on the
# store feature: without --store the store is memory).
cargo build --profile "$profile" --features sqlite --example replay
replay="$target/$profile_dir/examples/replay"
transcripts=(examples/transcripts/*.json)

# docs/guide/dispatch.md, "The main job": --scope call over every transcript.
per_call=$("$replay" --scope call "${transcripts[@]}" | tail -n 1)
echo "--scope call, all transcripts: $per_call"
grep -q '"executions":19,"replays":0,' <<<"$per_call" || fail "--scope call: expected executions 19, replays 0: $per_call"

# docs/guide/operating.md, "Traces": RUST_LOG=idem=debug prints the line shown on stderr,
# and stdout is the same as without it (the same lines; Gemini's random labels aside).
RUST_LOG=idem=debug "$replay" --lose-first-response "${transcripts[@]}" >"$scratch/traced.out" 2>"$scratch/traced.err"
"$replay" --lose-first-response "${transcripts[@]}" >"$scratch/plain.out"
shown='DEBUG idem.call{tool="demo_effect" scope.kind="conversation" conversation="examples/transcripts/anthropic-parallel-same-tool-4x.json" key="c84517bc772bc1a4" attempt=1 fence=1 status="executed"}: idem: executed recorded=true'
grep -qF "$shown" "$scratch/traced.err" || fail "RUST_LOG=idem=debug: no line ending in: $shown"
! grep -q 'idem.call' "$scratch/traced.out" || fail "RUST_LOG=idem=debug: traces on stdout"
[ "$(wc -l <"$scratch/traced.out")" = "$(wc -l <"$scratch/plain.out")" ] || fail "RUST_LOG=idem=debug: stdout has other lines"
[ "$(tail -n 1 "$scratch/traced.out")" = "$(tail -n 1 "$scratch/plain.out")" ] || fail "RUST_LOG=idem=debug: another summary"
echo "traces: on stderr, stdout unchanged"

# The `idem` command: the binary `cargo test -p idem-cli` built, else a build of it.
idem="$target/debug/idem"
[ -x "$idem" ] || cargo build -p idem-cli
[ -x "$idem" ] || fail "no idem binary at $idem"

# README.md's quickstart prints the first 8 digits of this key, and
# docs/guide/keys-and-scopes.md shows it whole.
key=$("$idem" key --tool send_refund --scope conversation=conv_42 --args '{"order_id":"ord_7","amount_cents":500}')
[ "$key" = 15df58ce2723390e08daa8d3e6df7e6c22733490705ade0ceeafbdb7c7bf9300 ] || fail "quickstart key: $key"
grep -q "(key ${key:0:8}) \[Replayed\]" README.md || fail "README.md's quickstart output does not show key ${key:0:8}"
# docs/guide/operating.md's support question: `key(order_id)`, so the order alone.
key=$("$idem" key --tool send_refund --scope conversation=c-9 --args '{"order_id":"ord_4417"}')
[ "$key" = 3cce9b5c28173bc3404c634f14c9b8626ad85b9f569825dd589531e0ccf4b86b ] || fail "support key: $key"
grep -q "^key        $key\$" docs/guide/operating.md || fail "docs/guide/operating.md's idem show does not show key $key"
echo "idem key: the keys the docs show"

# docs/guide/operating.md's `idem show` layout, on a real SQLite store written by the main
# job: its rows, and a call with other arguments is exit 1 with the tool's record count.
db="$scratch/idem.sqlite3"
"$replay" --store "sqlite:$db" "${transcripts[0]}" >/dev/null
listed=$("$idem" --store "sqlite:$db" ls --json --limit 1 2>/dev/null) # the next cursor goes to stderr
record_key=$(sed -E 's/.*"key":"([0-9a-f]{64})".*/\1/' <<<"$listed")
scope=$(sed -E 's/.*"scope":"([^"]*)".*/\1/' <<<"$listed")
shown=$("$idem" --store "sqlite:$db" show "$record_key")
for row in "key        $record_key" "tool       demo_effect" "namespace  -" "scope      $scope" \
  "state      completed" "fence      1 (1 attempt)" "created    " "completed  " "expires    " "outcome"; do
  grep -qF -- "$row" <<<"$shown" || fail "idem show: no row '$row' in:
$shown"
done
set +e
"$idem" --store "sqlite:$db" show --tool demo_effect --scope "$scope" --args '{}' >"$scratch/show.out" 2>"$scratch/show.err"
code=$?
set -e
[ "$code" = 1 ] || fail "idem show with other arguments: exit $code, expected 1"
grep -Eq "demo_effect has [0-9]+ records? in $scope: called with other arguments\?" "$scratch/show.err" \
  || fail "idem show with other arguments: $(cat "$scratch/show.err")"
echo "idem show: rows as documented; other arguments exit 1 with the count"

# README.md, "Any MCP server": the same send_refund twice through idem mcp-proxy in front of
# the Python SDK server (the venv of .ci/install-mcp-deps.sh): executed, then replayed, with
# the key shown, and one refund.
python="$target/mcp-venv/bin/python"
[ -x "$python" ] || fail "no $python: run .ci/install-mcp-deps.sh"
call='{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"send_refund","arguments":{"order_id":"ord_7","amount_cents":500},"_meta":{"conversationId":"conv_42"}}}'
proxied=$(
  {
    printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}' \
      '{"jsonrpc":"2.0","method":"notifications/initialized"}' "${call/ID/2}"
    sleep 1
    echo "${call/ID/3}"
    sleep 1
  } | REFUNDS_FILE="$scratch/refunds" IDEM_LOG=warn "$idem" mcp-proxy --store "sqlite:$scratch/proxy.db" \
    -- "$python" idem-cli/tests/mcp/payments_server.py
)
# Compared as JSON: the member order depends on the build's serde_json features.
python3 - "$proxied" <<'PY' || fail "idem mcp-proxy: not executed then replayed with the README's key and text: $proxied"
import json, sys
lines = {m["id"]: m for m in map(json.loads, sys.argv[1].splitlines())}
key = "15df58ce2723390e08daa8d3e6df7e6c22733490705ade0ceeafbdb7c7bf9300"
for id, status in ((2, "executed"), (3, "replayed")):
    result = lines[id]["result"]
    assert result["_meta"] == {"idem/key": key, "idem/status": status}, result
    assert result["content"][0]["text"] == "refund re_1 of 500 cents on ord_7", result
PY
[ "$(wc -l <"$scratch/refunds")" = 1 ] || fail "idem mcp-proxy: $(wc -l <"$scratch/refunds") refunds, expected 1"
echo "idem mcp-proxy: executed, then replayed, one refund"

echo "check-docs: the docs' shell examples print what they say"

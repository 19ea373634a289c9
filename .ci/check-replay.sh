#!/usr/bin/env bash
# The main job on the shipped transcripts: the counts the issue requires, with and
# without lost responses, and a clean failure on malformed input.
set -euo pipefail
cd "$(dirname "$0")/.."
# The README runs the main job in release; IDEM_CI_PROFILE=dev (what .ci/run sets) checks the
# same output with the debug build the tests already made, instead of building every
# dependency again with optimizations.
profile="${IDEM_CI_PROFILE:-release}"
profile_dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
cargo build --profile "$profile" --example replay
replay="${CARGO_TARGET_DIR:-target}/$profile_dir/examples/replay"
transcripts=(examples/transcripts/*.json)

field() { sed -E "s/.*\"$1\":([0-9]+).*/\1/" <<<"$2"; }
fail() { echo "check-replay: $*" >&2; exit 1; }

for file in "${transcripts[@]}"; do
  plain=$("$replay" "$file" | tail -n 1)
  lost=$("$replay" --lose-first-response "$file" | tail -n 1)
  echo "$(basename "$file"): $plain | lost first: $lost"
  [ "$(field errors "$plain")" = 0 ] || fail "$file: errors in $plain"
  [ "$(field executions "$plain")" = "$(field executions "$lost")" ] || fail "$file: executions changed when responses were lost"
  [ "$(field calls "$plain")" = "$(field attempts "$plain")" ] || fail "$file: retries without lost responses"
  [ "$(field attempts "$lost")" = $((2 * $(field calls "$lost"))) ] || fail "$file: expected two attempts per call when the first response is lost"
  # Issue 3 item 4: a first execution costs 2 store round trips, a replay 1.
  [ "$(field round_trips "$plain")" = $((2 * $(field executions "$plain") + $(field replays "$plain"))) ] || fail "$file: round trips are not 2 per execution + 1 per replay: $plain"
  [ "$(field round_trips "$lost")" = $(($(field round_trips "$plain") + $(field calls "$lost"))) ] || fail "$file: each retry after a lost response should cost exactly 1 round trip (a replay): $lost"
done

# Every call line shows its key's first 12 hex digits (S12, K10), also when the demo tool's
# `#[idempotent]` name differs from the provider's tool name.
lines=$("$replay" "${transcripts[@]}")
! grep -q $'\tkey -\t' <<<"$lines" || fail "a call line shows no key: $(grep -m1 $'\tkey -\t' <<<"$lines")"
all=$(tail -n 1 <<<"$lines")
expected='{"files":10,"turns":11,"calls":19,"executions":17,"replays":2,"attempts":19,"errors":0,"round_trips":36}'
[ "$all" = "$expected" ] || fail "all transcripts: got $all, expected $expected"
all_lost=$("$replay" --lose-first-response "${transcripts[@]}" | tail -n 1)
expected_lost='{"files":10,"turns":11,"calls":19,"executions":17,"replays":2,"attempts":38,"errors":0,"round_trips":55}'
[ "$all_lost" = "$expected_lost" ] || fail "all transcripts, lost first responses: got $all_lost, expected $expected_lost"

gemini=$("$replay" examples/transcripts/gemini-identical-calls-no-id.json | tail -n 1)
[ "$(field calls "$gemini")" = 3 ] && [ "$(field executions "$gemini")" = 1 ] || fail "gemini identical calls: $gemini"
per_call=$("$replay" --scope call examples/transcripts/gemini-identical-calls-no-id.json | tail -n 1)
[ "$(field executions "$per_call")" = 3 ] || fail "gemini identical calls, --scope call: $per_call"

# Provider quirks (issue 10, contract D7-D11): our own small inputs, kept apart from the
# recorded transcripts so the counts above stay as they are.
quirk() { # FILE OPTIONS EXPECTED-CALLS EXPECTED-EXECUTIONS EXPECTED-REPLAYS
  local out
  out=$("$replay" $2 "examples/quirks/$1" | tail -n 1)
  echo "quirk $1 [$2]: $out"
  [ "$(field calls "$out")" = "$3" ] && [ "$(field executions "$out")" = "$4" ] && [ "$(field replays "$out")" = "$5" ] && [ "$(field errors "$out")" = 0 ] \
    || fail "quirk $1 [$2]: expected calls $3, executions $4, replays $5, no errors: $out"
}
for lost in "" "--lose-first-response"; do
  quirk openai-chat-parallel-wrapper-four-searches.json "$lost" 4 4 0
  quirk openai-chat-parallel-wrapper-two-identical.json "$lost" 2 1 1
  quirk openai-responses-parallel-wrapper.json "$lost" 2 2 0
  quirk mcp-bare-call-params.json "$lost" 1 1 0
  quirk gemini-integral-floats.json "$lost" 2 1 1
  quirk openai-chat-reused-call-ids.json "$lost" 2 1 1
  quirk openai-chat-parallel-wrapper-four-searches.json "--scope call $lost" 4 4 0
  quirk openai-chat-parallel-wrapper-two-identical.json "--scope call $lost" 2 2 0
  quirk openai-responses-parallel-wrapper.json "--scope call $lost" 2 2 0
  quirk mcp-bare-call-params.json "--scope call $lost" 1 1 0
  quirk gemini-integral-floats.json "--scope call $lost" 2 2 0
  quirk openai-chat-reused-call-ids.json "--scope call $lost" 2 2 0
done
# Each call's status comes from its own outcome (D11): with call ids repeated across turns,
# the second response's equal call is printed as a replay, not as an execution.
lines=$("$replay" --lose-first-response examples/quirks/openai-chat-reused-call-ids.json)
statuses=$(head -n 2 <<<"$lines" | cut -f 7 | tr '\n' ' ')
[ "$statuses" = "executed replayed " ] || fail "reused call ids: statuses '$statuses', expected 'executed replayed '"
lines=$("$replay" --scope call --lose-first-response examples/quirks/openai-chat-reused-call-ids.json)
statuses=$(head -n 2 <<<"$lines" | cut -f 7 | tr '\n' ' ')
[ "$statuses" = "executed executed " ] || fail "reused call ids, --scope call: statuses '$statuses', expected 'executed executed '"
# A wrapper's calls are printed under their own names, with ids derived from the wrapper's.
lines=$("$replay" examples/quirks/openai-chat-parallel-wrapper-four-searches.json)
wrapped=$(head -n 4 <<<"$lines" | cut -f 3,4 | tr '\t\n' ' ;')
[ "$wrapped" = "call_wrap4:0 file_search;call_wrap4:1 file_search;call_wrap4:2 file_search;call_wrap4:3 file_search;" ] || fail "wrapper calls: $wrapped"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '{"not":"a transcript"}' >"$scratch/unknown.json"
printf '{"choices": [' >"$scratch/truncated.json"
for bad in "$scratch/unknown.json" "$scratch/truncated.json" "$scratch/missing.json"; do
  set +e
  "$replay" "$bad" >"$scratch/out" 2>"$scratch/err"
  code=$?
  set -e
  [ "$code" = 1 ] || fail "$bad: expected exit 1, got $code"
  grep -q "$(basename "$bad")" "$scratch/err" || fail "$bad: the message does not name the file: $(cat "$scratch/err")"
  ! grep -q panicked "$scratch/err" || fail "$bad: panicked"
  echo "malformed $(basename "$bad"): $(head -n 1 "$scratch/err")"
done
# Persistence (issue 3 item 10): the same transcripts twice through one SQLite file; the
# second run replays everything. A locator whose feature is off names the feature.
set +e
"$replay" --store "sqlite:$scratch/off.sqlite3" "${transcripts[0]}" >"$scratch/out" 2>"$scratch/err"
code=$?
set -e
[ "$code" = 1 ] && grep -q 'needs the `sqlite` cargo feature' "$scratch/err" || fail "--store sqlite without the feature: exit $code, $(cat "$scratch/err")"
cargo build --profile "$profile" --features sqlite --example replay
db="$scratch/persist.sqlite3"
first=$("$replay" --store "sqlite:$db" "${transcripts[@]}" | tail -n 1)
second=$("$replay" --store "sqlite:$db" "${transcripts[@]}" | tail -n 1)
echo "persistence, first run:  $first"
echo "persistence, second run: $second"
[ "$(field executions "$first")" = 17 ] || fail "persistence first run: $first"
[ "$(field executions "$second")" = 0 ] && [ "$(field replays "$second")" = 19 ] && [ "$(field errors "$second")" = 0 ] || fail "persistence second run: $second"
[ "$(field round_trips "$second")" = 19 ] || fail "persistence second run: a replay should cost 1 round trip: $second"
echo "check-replay: all counts as expected"

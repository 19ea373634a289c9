#!/usr/bin/env bash
# Installs the third-party MCP programs the MCP interop tests run, under target/ (gitignored):
#   target/mcp-venv  a Python venv with idem-cli/tests/mcp/requirements.txt (the official
#                    Python SDK: payments_server.py, client.py);
#   target/mcp-node  npm packages, exact versions: the reference "everything" server
#                    (tests/it/mcp_transparency.rs, feature `test-mcp-node`) and the MCP
#                    conformance suite.
# Idempotent: each part is skipped when its stamp file says it is installed as asked, so a
# second run works offline. A registry that cannot be reached fails the script (non-zero).
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned npm packages. server-everything: the registry's latest when pinned. conformance:
# 0.1.16 crashes on Node 20; 0.1.13 runs.
NODE_PACKAGES=(
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.13"
)

target="${CARGO_TARGET_DIR:-target}"
venv="$target/mcp-venv"
node_dir="$target/mcp-node"
requirements="idem-cli/tests/mcp/requirements.txt"

started=$SECONDS
say() { echo "install-mcp-deps: $*"; }
fail() { echo "install-mcp-deps: ERROR: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null || fail "$1 is not installed (needed for $2)"; }

mkdir -p "$target"

# ---- (a) the Python venv ----
need python3 "the Python venv"
py_stamp="$venv/.idem-requirements.sha256"
py_want="$(sha256sum "$requirements" | cut -d' ' -f1) $(python3 --version 2>&1)"
if [ -f "$py_stamp" ] && [ "$(cat "$py_stamp")" = "$py_want" ] && [ -x "$venv/bin/python" ]; then
  say "python venv $venv: up to date ($requirements unchanged), skipped"
else
  part=$SECONDS
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv" || fail "python3 -m venv $venv failed"
  # --disable-pip-version-check: no look-up of pip's own latest version.
  "$venv/bin/pip" install --disable-pip-version-check --quiet -r "$requirements" ||
    fail "pip install -r $requirements failed (is the package index reachable?)"
  echo "$py_want" >"$py_stamp"
  say "python venv $venv: installed $(grep -E "^(mcp|mcp-types)==" "$requirements" | tr "\n" " ")and $(grep -c "==" "$requirements") pinned packages in all, in $((SECONDS - part)) s"
fi

# ---- (b) the npm packages ----
need node "the MCP servers written for Node"
need npm "the MCP servers written for Node"
node_stamp="$node_dir/.idem-packages"
node_want="${NODE_PACKAGES[*]} node=$(node --version)"
installed_as_pinned() {
  local spec name version manifest
  for spec in "${NODE_PACKAGES[@]}"; do
    name="${spec%@*}"
    version="${spec##*@}"
    manifest="$node_dir/node_modules/$name/package.json"
    [ -f "$manifest" ] || return 1
    [ "$(node -p 'require(require("path").resolve(process.argv[1])).version' "$manifest")" = "$version" ] ||
      return 1
  done
}
if [ -f "$node_stamp" ] && [ "$(cat "$node_stamp")" = "$node_want" ] && installed_as_pinned; then
  say "npm packages in $node_dir: up to date (${NODE_PACKAGES[*]}), skipped"
else
  part=$SECONDS
  mkdir -p "$node_dir"
  npm install --prefix "$node_dir" --no-audit --no-fund --save-exact "${NODE_PACKAGES[@]}" ||
    fail "npm install of ${NODE_PACKAGES[*]} failed (is the npm registry reachable?)"
  installed_as_pinned || fail "npm install did not leave ${NODE_PACKAGES[*]} in $node_dir/node_modules"
  # Both must run on this machine's Node, not just be on disk.
  "$node_dir/node_modules/.bin/conformance" --help >/dev/null ||
    fail "conformance --help fails on node $(node --version)"
  [ -f "$node_dir/node_modules/@modelcontextprotocol/server-everything/dist/index.js" ] ||
    fail "server-everything has no dist/index.js"
  echo "$node_want" >"$node_stamp"
  say "npm packages in $node_dir: installed ${NODE_PACKAGES[*]} in $((SECONDS - part)) s"
fi

say "done in $((SECONDS - started)) s"

"""Command-line MCP client built on the official MCP Python SDK (mcp==2.3.0), for interop tests.

Usage: python client.py STEPS_JSON -- COMMAND [ARGS...]

Spawns COMMAND over stdio (it inherits this process's whole environment and stderr),
connects with the SDK's `mcp.Client`, and runs STEPS_JSON, a JSON array of steps:
  {"tool": NAME, "arguments": {...}, "meta": {...}}   tools/call; "meta" (optional) is sent
                                                       as params._meta
  {"list_tools": true}                                 tools/list
printing one compact JSON line per step on stdout:
  tools/call: {"isError": bool, "text": str|null, "meta": obj|null, "structured": obj|null}
  tools/list: {"tools": [{"name": str, "annotations": obj|null}, ...]}

MCP_CLIENT_MODE (env) picks the SDK's connect mode: "auto" (default: probes server/discover,
falls back to the initialize handshake), "legacy" (initialize handshake only), or a modern
protocol version such as "2026-07-28" (adopted without any handshake).
Exit 0 on success; on any exception the traceback goes to stderr and the exit code is 1.
"""

import json
import os
import sys
import traceback

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import TextContent


def _dump(model):
    """A pydantic model (or None) as its wire-shaped JSON value."""
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(steps, command, mode):
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(params, mode=mode) as client:
        for step in steps:
            if step.get("list_tools"):
                listed = await client.list_tools()
                tools = [{"name": t.name, "annotations": _dump(t.annotations)} for t in listed.tools]
                out = {"tools": tools}
            else:
                result = await client.call_tool(step["tool"], step.get("arguments") or {}, meta=step.get("meta"))
                text = next((c.text for c in result.content if isinstance(c, TextContent)), None)
                out = {
                    "isError": bool(result.is_error),
                    "text": text,
                    "meta": result.meta,
                    "structured": result.structured_content,
                }
            print(json.dumps(out, separators=(",", ":")), flush=True)


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print("usage: client.py STEPS_JSON -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    steps = json.loads(argv[1])
    mode = os.environ.get("MCP_CLIENT_MODE") or "auto"
    try:
        anyio.run(run, steps, argv[3:], mode)
    except BaseException:
        traceback.print_exc(file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

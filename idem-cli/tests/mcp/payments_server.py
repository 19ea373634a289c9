"""A stdio MCP server, written with the official MCP Python SDK (mcp==2.3.0), for interop tests.

Tools:
  send_refund(order_id, amount_cents)  side-effecting (no annotations): appends
      "<order_id> <amount_cents>\\n" to $REFUNDS_FILE (flush + fsync), then sleeps
      $REFUND_DELAY_MS ms if set (the effect has already happened by then), and returns
      "refund re_<n> of <amount> cents on <order>", n = lines now in the file.
  lookup_order(order_id)  readOnlyHint=true: appends "lookup <order_id>\\n" to $LOOKUPS_FILE
      if set, returns "order <order_id>: paid".

Stdout is the protocol: nothing else is written there (the SDK logs to stderr).
"""

import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("payments", version="1.0.0", log_level="WARNING")


def _append(path: str, line: str) -> int:
    """Append one line durably; return the number of lines the file now has."""
    with open(path, "a+", encoding="utf-8") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
        f.seek(0)
        return sum(1 for _ in f)


@server.tool()
def send_refund(order_id: str, amount_cents: int) -> str:
    """Refund amount_cents on order_id (side-effecting)."""
    n = _append(os.environ["REFUNDS_FILE"], f"{order_id} {amount_cents}\n")
    delay_ms = os.environ.get("REFUND_DELAY_MS")
    if delay_ms:
        time.sleep(int(delay_ms) / 1000.0)
    return f"refund re_{n} of {amount_cents} cents on {order_id}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_order(order_id: str) -> str:
    """Look up an order's payment status (read-only)."""
    lookups = os.environ.get("LOOKUPS_FILE")
    if lookups:
        _append(lookups, f"lookup {order_id}\n")
    return f"order {order_id}: paid"


if __name__ == "__main__":
    server.run("stdio")

"""MCP skill tool calls against A2A sends to the same agent, interleaved.

Usage: mcp_call.py <traffic URL> <agent id> <skill id> [calls] [warmup]

One client, one call in flight. Each round makes four calls in turn to the
same agent (which completes each task at once):
  a2a      SendMessage over JSON-RPC (blocking), posted with httpx;
  a2a-stream  SendStreamingMessage over JSON-RPC, its events read from SSE
           (what an MCP skill call runs inside the gateway);
  mcp      tools/call of `<agent>__<skill>` posted with httpx to the MCP
           session (Streamable HTTP; the answer read from its SSE stream);
  mcp-sdk  the same tool called through the official MCP Python SDK
           (ClientSession.call_tool), which rides on httpx as well.
`a2a` and `mcp` go through the same HTTP client in the same process, so
their ratio is the gateway's: MCP's session, the streamed send, the task
read back and the answer's encoding. `mcp-sdk` adds what the SDK costs a
client. Prints one JSON object: p50/p90 in ms and calls/s per kind, and
the ratios of `mcp` and `mcp-sdk` p50 to `a2a` p50.
"""

import asyncio
import json
import statistics
import sys
import time

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

ACCEPT = "application/json, text/event-stream"


async def a2a_send(http, url, n):
    body = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "SendMessage",
        "params": {"message": {"messageId": f"a{n}", "role": "ROLE_USER", "parts": [{"text": "ping"}]}},
    }
    r = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
    state = r.json()["result"]["task"]["status"]["state"]
    if state != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"A2A answered {state}")


async def a2a_stream(http, url, n):
    body = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "SendStreamingMessage",
        "params": {"message": {"messageId": f"s{n}", "role": "ROLE_USER", "parts": [{"text": "ping"}]}},
    }
    last = None
    async with http.stream("POST", url, json=body, headers={"A2A-Version": "1.0"}) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                last = json.loads(line[5:])
    update = (last or {}).get("result", {}).get("statusUpdate", {})
    if update.get("status", {}).get("state") != "TASK_STATE_COMPLETED":
        raise RuntimeError(f"the stream ended with {last}")


class RawMcp:
    """A Streamable HTTP session held by hand: initialize, then tools/call."""

    def __init__(self, http, url):
        self.http, self.url, self.session = http, url, None

    async def post(self, body):
        headers = {"Accept": ACCEPT, "MCP-Protocol-Version": "2025-06-18"}
        if self.session:
            headers["Mcp-Session-Id"] = self.session
        async with self.http.stream("POST", self.url, json=body, headers=headers) as r:
            if r.status_code >= 400:
                raise RuntimeError(f"MCP answered {r.status_code}: {(await r.aread())[:200]!r}")
            self.session = r.headers.get("mcp-session-id", self.session)
            if "id" not in body:
                return None
            if r.headers.get("content-type", "").startswith("application/json"):
                return json.loads(await r.aread())
            async for line in r.aiter_lines():
                if line.startswith("data:") and line[5:].strip():
                    msg = json.loads(line[5:])
                    if msg.get("id") == body["id"]:
                        return msg
        raise RuntimeError("the MCP stream ended without the answer")

    async def open(self):
        await self.post({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "bench", "version": "1"}},
        })
        await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call(self, tool, n):
        msg = await self.post({
            "jsonrpc": "2.0", "id": n, "method": "tools/call",
            "params": {"name": tool, "arguments": {"text": "ping"}},
        })
        if "error" in msg or msg["result"].get("isError"):
            raise RuntimeError(f"MCP tool call failed: {msg}")


async def main(base, agent, skill, calls, warmup):
    tool = f"{agent}__{skill}"
    a2a_url = f"{base}/a2a/agents/{agent}"
    mcp_url = f"{base}/mcp"
    times = {"a2a": [], "a2a-stream": [], "mcp": [], "mcp-sdk": []}
    async with httpx.AsyncClient(timeout=30) as http:
        raw = RawMcp(http, mcp_url)
        await raw.open()
        sdk_http = create_mcp_http_client()
        async with sdk_http, streamable_http_client(mcp_url, http_client=sdk_http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()

                async def sdk_call(n):
                    result = await session.call_tool(tool, {"text": "ping"})
                    if result.isError:
                        raise RuntimeError(f"MCP SDK tool call failed: {result}")

                kinds = [
                    ("a2a", lambda n: a2a_send(http, a2a_url, n)),
                    ("a2a-stream", lambda n: a2a_stream(http, a2a_url, n)),
                    ("mcp", lambda n: raw.call(tool, n)),
                    ("mcp-sdk", sdk_call),
                ]
                for n in range(1, warmup + calls + 1):
                    # The order turns each round, so no kind always follows another.
                    for name, call in kinds[n % 4:] + kinds[: n % 4]:
                        started = time.perf_counter()
                        await asyncio.wait_for(call(n), 30)
                        if n > warmup:
                            times[name].append(time.perf_counter() - started)

    def summary(xs):
        xs = sorted(xs)
        return {
            "p50_ms": round(statistics.median(xs) * 1000, 3),
            "p90_ms": round(xs[int(len(xs) * 0.9)] * 1000, 3),
            "calls_per_sec": round(len(xs) / sum(xs), 1),
        }

    out = {k: summary(v) for k, v in times.items()}
    out["calls"] = calls
    out["mcp_over_a2a_p50"] = round(out["mcp"]["p50_ms"] / out["a2a"]["p50_ms"], 3)
    out["mcp_sdk_over_a2a_p50"] = round(out["mcp-sdk"]["p50_ms"] / out["a2a"]["p50_ms"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    base, agent, skill = sys.argv[1].rstrip("/"), sys.argv[2], sys.argv[3]
    calls = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    warmup = int(sys.argv[5]) if len(sys.argv) > 5 else 100
    asyncio.run(main(base, agent, skill, calls, warmup))

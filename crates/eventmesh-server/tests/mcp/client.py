"""Drives the mesh's MCP gateway with the official MCP Python SDK.

Usage: client.py main <mcp url>
       client.py tenant <mcp url> <token> <another tenant's agent tool>

Prints one JSON line per step ({"step": name, ...}); the Rust test
(tests/mcp.rs) compares them with what it expects. Every wait is bounded.

Scenarios:
- main: tools, publish and read back, the echo agent's skill (with
  progress), a second agent registering (tools/list_changed), request-reply
  (answered by the test), an unknown tool, the topics as resources;
- tenant: what one tenant's token sees of topics and agents.
"""

import asyncio
import json
import sys

import anyio
import httpx
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from pydantic import AnyUrl

WAIT = 20


def say(step, **fields):
    print(json.dumps({"step": step, **fields}, sort_keys=True), flush=True)


def texts(result):
    return [c.text for c in result.content if c.type == "text"]


def agent_tools(tools):
    return sorted(t.name for t in tools.tools if "__" in t.name)


class Notes:
    """Notifications that are not replies: tools/list_changed."""

    def __init__(self):
        self.changed = anyio.Event()

    async def __call__(self, message):
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ToolListChangedNotification
        ):
            self.changed.set()


async def main_scenario(session, notes, base, headers):
    tools = await session.list_tools()
    say("tools", names=sorted(t.name for t in tools.tools))

    published = await session.call_tool(
        "publish",
        {"topic": "mcp.orders", "type": "order.created", "id": "o-1", "data": {"n": 1}},
    )
    say("publish", error=published.isError, result=published.structuredContent)

    read = await session.call_tool("read_events", {"topic": "mcp.orders"})
    got = read.structuredContent
    say(
        "read",
        error=read.isError,
        events=[
            {"id": e["event"]["id"], "type": e["event"]["type"], "data": e["event"]["data"],
             "topic": e["topic"], "offset": e["offset"]}
            for e in got["events"]
        ],
        next=got["next"],
    )
    more = await session.call_tool(
        "read_events", {"topic": "mcp.orders", "from": got["next"], "waitMs": 200}
    )
    say("read_more", events=len(more.structuredContent["events"]), next=more.structuredContent["next"])

    # A read that waits: it starts from the cursor, so whether the event
    # comes before or while it waits, it is the one read.
    waited = {}

    async def read_waiting():
        waited["r"] = await session.call_tool(
            "read_events", {"topic": "mcp.orders", "from": got["next"], "waitMs": WAIT * 1000}
        )

    event = {"specversion": "1.0", "id": "o-2", "source": "/test", "type": "order.created",
             "datacontenttype": "application/json", "data": {"n": 2}}
    async with anyio.create_task_group() as tg:
        tg.start_soon(read_waiting)
        async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
            r = await http.post(f"{base}/events/publish?topic=mcp.orders", content=json.dumps(event),
                                headers={"content-type": "application/cloudevents+json"})
            r.raise_for_status()
    say("read_wait", events=[e["event"]["id"] for e in waited["r"].structuredContent["events"]])

    pattern = await session.call_tool("read_events", {"topic": "mcp.*"})
    say("read_pattern", events=[[e["topic"], e["event"]["id"]] for e in pattern.structuredContent["events"]])

    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "message": message})

    echoed = await session.call_tool(
        "echo__echo", {"text": "hello stream mesh"}, progress_callback=on_progress
    )
    say(
        "echo",
        error=echoed.isError,
        texts=texts(echoed),
        state=(echoed.meta or {}).get("taskState"),
        progress=[p["message"] for p in progress],
        steps=[p["progress"] for p in progress],
    )

    failed = await session.call_tool("echo__echo", {"text": "fail: out of words"})
    say("echo_fail", error=failed.isError, texts=texts(failed))

    # A second agent registers: the open session is told its tools changed.
    card = {
        "name": "Calculator", "description": "adds numbers", "version": "1",
        "skills": [{"id": "sum", "name": "Sum", "description": "Adds numbers", "tags": ["math"]}],
    }
    async with httpx.AsyncClient(headers=headers, timeout=WAIT) as http:
        r = await http.post(f"{base}/a2a/agents", json={"id": "calc", "card": card})
        r.raise_for_status()
    with anyio.fail_after(WAIT):
        await notes.changed.wait()
    tools = await session.list_tools()
    say("changed", notified=True, agents=agent_tools(tools))

    found = await session.call_tool("find_agents", {"query": "math"})
    say("find", agents=[a["id"] for a in found.structuredContent["agents"]],
        tools=[s["tool"] for a in found.structuredContent["agents"] for s in a["skills"]])

    replied = await session.call_tool(
        "request",
        {"topic": "mcp.quotes", "type": "quote.asked", "id": "q-1", "data": {"n": 2},
         "timeoutMs": WAIT * 1000},
    )
    reply = (replied.structuredContent or {}).get("reply", {})
    say("request", error=replied.isError, id=reply.get("id"), data=reply.get("data"))

    try:
        await session.call_tool("no_such_tool", {})
        say("unknown", error=None)
    except Exception as e:  # the server answers a JSON-RPC error
        say("unknown", error=str(e))

    bad = await session.call_tool("read_events", {"topic": "mcp.orders", "max": 1000})
    say("bad_argument", error=bad.isError, texts=texts(bad))

    resources = await session.list_resources()
    uris = sorted(str(r.uri) for r in resources.resources)
    contents = await session.read_resource(AnyUrl("eventmesh://topics/mcp.orders"))
    recent = json.loads(contents.contents[0].text)
    say("resources", has_orders="eventmesh://topics/mcp.orders" in uris,
        recent=[e["event"]["id"] for e in recent["events"]])


async def tenant_scenario(session, other_tool):
    tools = await session.list_tools()
    say("tools", agents=agent_tools(tools))
    topics = await session.call_tool("list_topics", {})
    say("topics", names=sorted(t["name"] for t in topics.structuredContent["topics"]))
    for step, topic in [("read_acme", "acme.orders"), ("read_missing", "acme.nothing")]:
        read = await session.call_tool("read_events", {"topic": topic})
        say(step, error=read.isError, texts=texts(read))
    found = await session.call_tool("find_agents", {})
    say("find", agents=[a["id"] for a in found.structuredContent["agents"]])
    try:
        await session.call_tool(other_tool, {"text": "hi"})
        say("call_other", error=None)
    except Exception as e:
        say("call_other", error=str(e))


async def run(scenario, url, token, other_tool):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = url.rsplit("/mcp", 1)[0]
    notes = Notes()
    http = create_mcp_http_client(headers=headers)
    async with http, streamable_http_client(url, http_client=http) as (read, write, _):
        async with ClientSession(read, write, message_handler=notes) as session:
            with anyio.fail_after(WAIT):
                init = await session.initialize()
            say("initialize", server=init.serverInfo.name,
                list_changed=bool(init.capabilities.tools and init.capabilities.tools.listChanged))
            with anyio.fail_after(120):
                if scenario == "main":
                    await main_scenario(session, notes, base, headers)
                else:
                    await tenant_scenario(session, other_tool)


if __name__ == "__main__":
    scenario, url = sys.argv[1], sys.argv[2]
    token = sys.argv[3] if len(sys.argv) > 3 else None
    other_tool = sys.argv[4] if len(sys.argv) > 4 else None
    asyncio.run(run(scenario, url, token, other_tool))

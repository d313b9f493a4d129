"""Drives an agent behind the eventmesh A2A gateway with the official
Python A2A client (a2a-sdk 1.3) and prints one JSON line per step, which
the Rust test compares with what it expects.

Usage: python client.py AGENT_BASE_URL VERSION [BINDING]
  AGENT_BASE_URL  where the agent's card is (.../a2a/agents/<id>)
  VERSION         1.0 or 0.3: the card's interfaces are narrowed to that
                  version, so the client speaks it (the SDK picks the
                  version from the interface it uses).
  BINDING         JSONRPC (the default), HTTP+JSON or GRPC: the only
                  binding the client is allowed to use.

The agent must be the built-in echo agent (`eventmesh agent echo`).
"""

import asyncio
import json
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
)
from google.protobuf.json_format import MessageToDict


class Webhook:
    """A real webhook receiver on a free port. Path /flaky answers 500 to
    its first two requests; every other request gets 200."""

    def __init__(self):
        self.seen = []  # (path, status answered, token, authorization, body)
        self.lock = threading.Lock()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with hook.lock:
                    flaky_seen = sum(1 for s in hook.seen if s[0] == "/flaky")
                    status = 500 if self.path == "/flaky" and flaky_seen < 2 else 200
                    hook.seen.append((self.path, status,
                                      self.headers.get("x-a2a-notification-token"),
                                      self.headers.get("authorization"),
                                      json.loads(body)))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def received(self, path):
        with self.lock:
            return [s for s in self.seen if s[0] == path]

    async def until(self, path, done, within=30):
        """Waits (bounded) until `done` holds for what `path` received."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            got = self.received(path)
            if done(got):
                return got
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{path}: {self.received(path)}")


def notified_state(body):
    """The task state a notification reports: v1.0 sends the
    StreamResponse of each change, v0.3 the whole task."""
    for key in ("task", "statusUpdate"):
        if key in body:
            return key + ":" + body[key]["status"]["state"]
    if "artifactUpdate" in body:
        return "artifactUpdate"
    if body.get("kind") == "task":
        return "task:" + body["status"]["state"]
    return "?"


def out(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def message(text, task_id="", context_id=""):
    return Message(
        role=Role.ROLE_USER,
        message_id=str(uuid.uuid4()),
        task_id=task_id,
        context_id=context_id,
        parts=[Part(text=text)],
    )


def only_version(card: AgentCard, version: str) -> AgentCard:
    major = version.split(".")[0]
    pinned = AgentCard()
    pinned.CopyFrom(card)
    keep = [i for i in card.supported_interfaces if i.protocol_version.split(".")[0] == major]
    del pinned.supported_interfaces[:]
    pinned.supported_interfaces.extend(keep)
    return pinned


def state(task):
    return MessageToDict(task.status).get("state", "")


def status_text(task):
    return "".join(p.text for p in task.status.message.parts)


def describe(ev):
    kind = ev.WhichOneof("payload")
    if kind == "task":
        return {"kind": "task", "state": state(ev.task)}
    if kind == "status_update":
        return {"kind": "status", "state": MessageToDict(ev.status_update.status).get("state", "")}
    if kind == "artifact_update":
        a = ev.artifact_update
        return {
            "kind": "artifact",
            "text": "".join(p.text for p in a.artifact.parts),
            "append": a.append,
            "last": a.last_chunk,
        }
    return {"kind": kind}


async def one(client, request):
    """The single answer of a non-streaming send."""
    got = [ev async for ev in client.send_message(request)]
    assert len(got) == 1, got
    return got[0].task


async def error_name(call):
    try:
        await call
    except Exception as e:  # the typed error the SDK raised
        return type(e).__name__
    return "none"


def final(state):
    return state.endswith(("COMPLETED", ":completed"))


class V03Rest:
    """What the SDK's v0.3 REST transport does not offer (listing and
    deleting push configs), sent to the same v0.3 routes by hand."""

    def __init__(self, http, base):
        self.http, self.base = http, base.rstrip("/")

    async def call(self, verb, path):
        r = await self.http.request(verb, f"{self.base}/v1/{path}", headers={"A2A-Version": "0.3"})
        r.raise_for_status()
        return r.json()

    async def list_ids(self, task_id):
        listed = await self.call("GET", f"tasks/{task_id}/pushNotificationConfigs")
        return [c["pushNotificationConfig"]["id"] for c in listed["configs"]]

    async def delete(self, task_id, config_id):
        await self.call("DELETE", f"tasks/{task_id}/pushNotificationConfigs/{config_id}")


async def push_notifications(blocking, version, ended, by_hand):
    hook = Webhook()
    auth = AuthenticationInfo(scheme="Bearer", credentials="cred-" + version)
    # A webhook named with the send: every change of the task is POSTed.
    config = TaskPushNotificationConfig(url=hook.url + "/send", token="tok-" + version,
                                        authentication=auth)
    task = await one(blocking, SendMessageRequest(
        message=message("push me"),
        configuration=SendMessageConfiguration(task_push_notification_config=config)))
    got = await hook.until("/send", lambda g: any(final(notified_state(s[4])) for s in g))
    out("push_send", state=state(task),
        states=[notified_state(s[4]) for s in got],
        token=sorted({s[2] for s in got}), auth=sorted({s[3] for s in got}))

    # The config methods on a task waiting for input.
    asked = await one(blocking, SendMessageRequest(message=message("ask: push?")))
    created = await blocking.create_task_push_notification_config(TaskPushNotificationConfig(
        task_id=asked.id, id="cfg-1", url=hook.url + "/flaky", token="tok-2"))
    got = await blocking.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg-1"))
    if by_hand:
        listed = await by_hand.list_ids(asked.id)
    else:
        listed = [c.id for c in (await blocking.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=asked.id))).configs]
    out("push_config", created=[created.id, created.task_id, created.url == hook.url + "/flaky"],
        got=[got.id, got.token], listed=listed)
    out("push_denied", error=await error_name(blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=asked.id, url="http://10.1.2.3/hook"))))

    # A webhook that fails twice gets the notification on a retry.
    await one(blocking, SendMessageRequest(message=message("ask: yes", task_id=asked.id)))
    flaky = await hook.until("/flaky", lambda g: any(s[1] == 200 and final(notified_state(s[4])) for s in g))
    out("push_retry", failed=sum(1 for s in flaky if s[1] == 500),
        delivered=sorted({notified_state(s[4]) for s in flaky if s[1] == 200}),
        token=sorted({s[2] for s in flaky}))

    if by_hand:
        await by_hand.delete(asked.id, "cfg-1")
    else:
        await blocking.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg-1"))
    out("push_deleted", error=await error_name(blocking.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=asked.id, id="cfg-1"))))
    out("push_unknown_task", error=await error_name(blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id="no-such-task", url=hook.url + "/x"))))
    out("push_ended", error=await error_name(blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=ended, url=hook.url + "/late"))))
    hook.server.shutdown()


async def main():
    base, version = sys.argv[1], sys.argv[2]
    binding = sys.argv[3] if len(sys.argv) > 3 else "JSONRPC"
    http = httpx.AsyncClient(timeout=30)
    card = await A2ACardResolver(http, base).get_agent_card()
    out("card", name=card.name, streaming=card.capabilities.streaming,
        versions=sorted({i.protocol_version for i in card.supported_interfaces}))
    card = only_version(card, version)
    config = dict(httpx_client=http, supported_protocol_bindings=[binding])
    if binding == "GRPC":
        # The card's gRPC URL is `host:port`, a channel target as it is.
        import grpc
        config["grpc_channel_factory"] = grpc.aio.insecure_channel
    blocking = ClientFactory(ClientConfig(streaming=False, **config)).create(card)
    streaming = ClientFactory(ClientConfig(streaming=True, **config)).create(card)
    # An interface with a tenant (the gRPC one names the agent so) is
    # wrapped in the SDK's tenant decorator: report the transport inside.
    transport = getattr(blocking._transport, "_base", blocking._transport)
    out("transport", name=type(transport).__name__)

    task = await one(blocking, SendMessageRequest(message=message("hello mesh")))
    out("send", state=state(task), text=status_text(task), history=len(task.history))
    first = task.id

    events = [describe(ev) async for ev in streaming.send_message(
        SendMessageRequest(message=message("hello stream mesh")))]
    out("stream", events=events)

    got = await blocking.get_task(GetTaskRequest(id=first, history_length=1))
    out("get", id_matches=got.id == first, state=state(got), history=len(got.history))

    if version.startswith("1"):
        page = await blocking.list_tasks(ListTasksRequest(page_size=1))
        out("list", count=len(page.tasks), total=page.total_size, more=page.next_page_token != "")

    asked = await one(blocking, SendMessageRequest(message=message("ask: your name?")))
    out("ask", state=state(asked), text=status_text(asked))
    done = await one(blocking, SendMessageRequest(
        message=message("ask: Ada", task_id=asked.id, context_id=asked.context_id)))
    out("answer", same_task=done.id == asked.id, state=state(done), text=status_text(done))

    # Resubscribe to a task waiting for input, then answer it meanwhile.
    waiting = await one(blocking, SendMessageRequest(message=message("ask: again?")))

    async def follow():
        return [describe(ev) async for ev in streaming.subscribe(SubscribeToTaskRequest(id=waiting.id))]

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    answered = await one(blocking, SendMessageRequest(
        message=message("ask: yes", task_id=waiting.id)))
    followed = await asyncio.wait_for(follower, 20)
    out("resubscribe", events=followed, state=state(answered))

    pending = await one(blocking, SendMessageRequest(
        message=message("ask: cancel me"),
        configuration=SendMessageConfiguration(return_immediately=False)))
    canceled = await blocking.cancel_task(CancelTaskRequest(id=pending.id))
    out("cancel", state=state(canceled))
    out("cancel_again", error=await error_name(blocking.cancel_task(CancelTaskRequest(id=pending.id))))
    out("get_unknown", error=await error_name(blocking.get_task(GetTaskRequest(id="no-such-task"))))
    out("send_to_final", error=await error_name(one(blocking, SendMessageRequest(
        message=message("more", task_id=first)))))
    by_hand = V03Rest(http, base) if (version, binding) == ("0.3", "HTTP+JSON") else None
    await push_notifications(blocking, version, first, by_hand)

    failed = await one(blocking, SendMessageRequest(message=message("fail: no reason")))
    out("fail", state=state(failed), text=status_text(failed))

    immediate = await one(blocking, SendMessageRequest(
        message=message("later"), configuration=SendMessageConfiguration(return_immediately=True)))
    out("immediate", state=state(immediate))
    await blocking.close()
    await streaming.close()


if __name__ == "__main__":
    asyncio.run(main())

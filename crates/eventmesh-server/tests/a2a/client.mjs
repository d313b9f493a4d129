// Drives the built-in echo agent behind the eventmesh A2A gateway with the
// official JavaScript A2A client (@a2a-js/sdk 1.3) over one binding, and
// prints one JSON line per step, which the Rust test compares with what it
// expects.
//
// Usage: node client.mjs CARD_URL BINDING
//   CARD_URL  the agent's card (…/a2a/agents/<id>/.well-known/agent-card.json),
//             or the agent's URL (…/a2a/agents/<id>/), which the SDK resolves
//             the default card path against
//   BINDING   JSONRPC or HTTP+JSON: the only transport the client has.

import { randomUUID } from "node:crypto";
import { ClientFactory, JsonRpcTransportFactory, RestTransportFactory } from "@a2a-js/sdk/client";

const [cardUrl, binding] = process.argv.slice(2);
const out = (step, fields) => console.log(JSON.stringify({ step, ...fields }));

const transport = binding === "HTTP+JSON" ? new RestTransportFactory() : new JsonRpcTransportFactory();
const factory = new ClientFactory({ transports: [transport] });
const client = await factory.createFromUrl(
  cardUrl,
  cardUrl.endsWith("/agent-card.json") ? "" : undefined,
);

const message = (text, taskId = "") => ({
  message: {
    messageId: randomUUID(),
    contextId: "",
    taskId,
    role: 1, // ROLE_USER
    parts: [{ content: { $case: "text", value: text } }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
});
const text = (parts) => (parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const state = (task) => task.status?.state;
const errorName = async (call) => {
  try {
    await call;
    return "none";
  } catch (e) {
    return e.constructor.name;
  }
};

out("card", { name: (await client.getAgentCard()).name });

const sent = await client.sendMessage(message("hello js"));
out("send", { state: state(sent), text: text(sent.status?.message?.parts) });

const events = [];
for await (const ev of client.sendMessageStream(message("hello stream js"))) {
  const p = ev.payload ?? {};
  if (p.$case === "artifactUpdate") {
    events.push({ kind: "artifact", text: text(p.value.artifact?.parts) });
  } else if (p.$case === "statusUpdate") {
    events.push({ kind: "status", state: p.value.status?.state });
  } else {
    events.push({ kind: p.$case, state: p.value ? state(p.value) : undefined });
  }
}
out("stream", { events });

const got = await client.getTask({ id: sent.id, historyLength: 1, tenant: "" });
out("get", { same: got.id === sent.id, state: state(got), history: got.history.length });

const asked = await client.sendMessage(message("ask: cancel me"));
const canceled = await client.cancelTask({ id: asked.id, metadata: undefined, tenant: "" });
out("cancel", { asked: state(asked), state: state(canceled) });
out("cancel_again", { error: await errorName(client.cancelTask({ id: asked.id, metadata: undefined, tenant: "" })) });
out("get_unknown", { error: await errorName(client.getTask({ id: "no-such-task", tenant: "" })) });

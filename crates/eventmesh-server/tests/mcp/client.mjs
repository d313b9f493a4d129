// Drives the mesh's MCP gateway with the official MCP TypeScript SDK: one
// round trip (connect, list the tools, publish an event).
//
// Usage: node client.mjs <dir holding node_modules with the SDK> <mcp url>
// Prints one JSON line; the Rust test (tests/mcp.rs) compares it.

import { createRequire } from "node:module";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeDir, url] = process.argv.slice(2);
const require = createRequire(join(nodeDir, "package.json"));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const { Client } = await load("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = await load(
  "@modelcontextprotocol/sdk/client/streamableHttp.js",
);

const timer = setTimeout(() => {
  console.error("no answer within 30 s");
  process.exit(2);
}, 30_000);

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "eventmesh-test", version: "1.0.0" });
await client.connect(transport);
const tools = await client.listTools();
const published = await client.callTool({
  name: "publish",
  arguments: { topic: "mcp.ts", type: "ts.said", id: "ts-1", data: "hello from node" },
});
const read = await client.callTool({ name: "read_events", arguments: { topic: "mcp.ts" } });
console.log(
  JSON.stringify({
    server: client.getServerVersion()?.name,
    tools: tools.tools.map((t) => t.name).sort(),
    publishError: published.isError ?? false,
    published: published.structuredContent,
    read: read.structuredContent.events.map((e) => ({ id: e.event.id, data: e.event.data })),
  }),
);
await transport.terminateSession();
await client.close();
clearTimeout(timer);

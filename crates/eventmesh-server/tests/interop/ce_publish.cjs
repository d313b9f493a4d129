// Publishes events with the JavaScript CloudEvents SDK (npm `cloudevents`
// 10) in binary and structured mode, with JSON, text and binary data,
// non-ASCII text, double quotes, percent signs and typed extensions, sent
// with Node's fetch (which writes header characters up to U+00FF as
// ISO-8859-1 bytes).
//
// Usage: node ce_publish.cjs <publish url>   (NODE_PATH: the SDK's node_modules)
// Prints one JSON line per event: the case, the HTTP status and answer,
// and the event the server must hold, which the Rust test (tests/ce_sdk.rs)
// compares.

const { CloudEvent, HTTP } = require("cloudevents");

const url = process.argv[2];
const DATA = {
  json: [{ greeting: "Grüße 😀", n: 1.5, list: [1, "two", null] }, "application/json"],
  text: ['plain ü "q" 100%', "text/plain; charset=utf-8"],
  bytes: [Buffer.from([0, 1, 254, 255]), "application/octet-stream"],
};

function event(id, data, datacontenttype) {
  return new CloudEvent({
    id,
    source: "/sdk/js",
    type: "com.example.größe",
    subject: 'größe "q" 100%',
    time: "2026-12-06T10:00:00.000Z",
    datacontenttype,
    data,
    note: '50% off, "quoted", a%20b is not an escape here',
    count: 7,
    flag: true,
  });
}

// The event a binding-conformant receiver reads from these headers.
function expectedBinary(headers, body) {
  const out = {};
  for (const [name, value] of Object.entries(headers)) {
    const n = name.toLowerCase();
    if (n.startsWith("ce-")) {
      out[n.slice(3)] = unescapeValid(String(value));
    } else if (n === "content-type") {
      out.datacontenttype = value;
    }
  }
  const ct = out.datacontenttype || "";
  if (ct.includes("json")) out.data = JSON.parse(body);
  else if (ct.startsWith("text/")) out.data = String(body);
  else out.data_base64 = Buffer.from(body).toString("base64");
  return out;
}

// One round of percent-decoding where the escapes are valid.
function unescapeValid(v) {
  return v.replace(/(%[0-9A-Fa-f]{2})+/g, (m) => {
    try {
      return decodeURIComponent(m);
    } catch {
      return m;
    }
  });
}

async function send(id, message, expect) {
  const r = await fetch(url, {
    method: "POST",
    headers: Object.fromEntries(Object.entries(message.headers).map(([k, v]) => [k, String(v)])),
    body: message.body,
    signal: AbortSignal.timeout(30000),
  });
  const answer = await r.json();
  console.log(JSON.stringify({ case: id, status: r.status, answer, expect }));
}

(async () => {
  for (const [kind, [data, ct]] of Object.entries(DATA)) {
    let id = `js-binary-${kind}`;
    const b = HTTP.binary(event(id, data, ct));
    await send(id, b, expectedBinary(b.headers, b.body));
    id = `js-structured-${kind}`;
    const s = HTTP.structured(event(id, data, ct));
    await send(id, s, JSON.parse(s.body));
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});

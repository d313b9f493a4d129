// Parses recorded webhook pushes with the JavaScript CloudEvents SDK
// (npm `cloudevents` 10, `HTTP.toEvent`).
//
// Usage: node push_parse.cjs REQUESTS.json
//
// REQUESTS.json is a JSON array of {"headers": {lower-case name: value},
// "body_hex": the body in hex}, as a receiver recorded them. Prints
// one JSON line per event (a batch gives several): the request's index,
// the event's index in it, its attributes and extensions, the JSON type
// of each, and its data as {"json": value}, {"text": str} or {"hex":
// the bytes in hex}.
"use strict";

const fs = require("fs");
const { HTTP } = require("cloudevents");

const ATTRIBUTES = new Set(["data", "data_base64"]);

function typeOf(v) {
  if (typeof v === "boolean") return "boolean";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  if (typeof v === "string") return "string";
  return typeof v;
}

function dataOf(d) {
  if (d === undefined || d === null) return null;
  if (ArrayBuffer.isView(d)) {
    return { hex: Buffer.from(Array.from(d)).toString("hex") };
  }
  if (typeof d === "string") return { text: d };
  return { json: d };
}

const requests = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
requests.forEach((req, i) => {
  const body = Buffer.from(req.body_hex, "hex").toString("utf8");
  const got = HTTP.toEvent({ headers: req.headers, body });
  const events = Array.isArray(got) ? got : [got];
  events.forEach((ev, j) => {
    const attributes = {};
    const types = {};
    for (const [k, v] of Object.entries(ev.toJSON())) {
      if (ATTRIBUTES.has(k) || v === undefined) continue;
      attributes[k] = v;
      types[k] = typeOf(v);
    }
    console.log(
      JSON.stringify({ request: i, index: j, attributes, types, data: dataOf(ev.data) }),
    );
  });
});

"""Parses recorded webhook pushes with the Python CloudEvents SDK (core API).

Usage: push_parse.py REQUESTS.json

REQUESTS.json is a JSON array of {"headers": {lower-case name: value},
"body_hex": the body in hex}, as a receiver recorded them. Prints one
JSON line per event: the request's index, the event's index in it, its
attributes and extensions as the SDK gives them (a time as RFC 3339), the
JSON type of each, and its data as {"json": value}, {"text": str} or
{"hex": the bytes in hex}.

The SDK's core API reads one event per message: binary or structured
(`from_http` tells them apart). A batch (application/cloudevents-batch+json)
is read element by element, each as a structured message.
"""

import datetime
import json
import sys

from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

BATCH = "application/cloudevents-batch+json"
STRUCTURED = "application/cloudevents+json"


def type_of(v):
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, str):
        return "string"
    if isinstance(v, datetime.datetime):
        return "timestamp"
    return type(v).__name__


def shown(v):
    if isinstance(v, datetime.datetime):
        return v.isoformat().replace("+00:00", "Z")
    return v


def data_of(d):
    if d is None:
        return None
    if isinstance(d, (bytes, bytearray)):
        return {"hex": bytes(d).hex()}
    if isinstance(d, str):
        return {"text": d}
    return {"json": d}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        requests = json.load(f)
    for i, req in enumerate(requests):
        headers = req["headers"]
        body = bytes.fromhex(req["body_hex"])
        if headers.get("content-type", "").startswith(BATCH):
            messages = [
                HTTPMessage(
                    {"content-type": STRUCTURED},
                    json.dumps(e, ensure_ascii=False).encode(),
                )
                for e in json.loads(body)
            ]
        else:
            messages = [HTTPMessage(headers, body)]
        for j, m in enumerate(messages):
            ev = from_http(m, JSONFormat(), CloudEvent)
            attrs = ev.get_attributes()
            print(
                json.dumps(
                    {
                        "request": i,
                        "index": j,
                        "attributes": {k: shown(v) for k, v in attrs.items()},
                        "types": {k: type_of(v) for k, v in attrs.items()},
                        "data": data_of(ev.get_data()),
                    },
                    ensure_ascii=False,
                )
            )


main()

"""Publishes events with the Python CloudEvents SDK (PyPI `cloudevents` 2):
its `v1` API (which writes header values raw) and its `core` API (which
percent-encodes them), in binary and structured mode, with JSON, text and
binary data, non-ASCII text, double quotes, percent signs and typed
extensions. Binary-mode headers go out as UTF-8 (httpx with byte values)
and, once, as ISO-8859-1 (the standard library's http.client).

Usage: python ce_publish.py <publish url>
Prints one JSON line per event: the case, the HTTP status and answer, and
the event the server must hold (attributes as the binding decodes them,
data as sent), which the Rust test (tests/ce_sdk.rs) compares.
"""

import base64
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
import warnings
from datetime import datetime, timezone

import httpx
from cloudevents.core.bindings import http as core_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent as CoreEvent
from cloudevents.v1.http import CloudEvent as V1Event
from cloudevents.v1.http import to_binary as v1_binary
from cloudevents.v1.http import to_structured as v1_structured

warnings.simplefilter("ignore")
url = sys.argv[1]
client = httpx.Client(timeout=30)

DATA = {
    "json": ({"greeting": "Grüße 😀", "n": 1.5, "list": [1, "two", None]}, "application/json"),
    "text": ("plain ü \"q\" 100%", "text/plain; charset=utf-8"),
    "bytes": (b"\x00\x01\xfe\xff", "application/octet-stream"),
}


def attributes(case, subject):
    return {
        "id": case,
        "source": "/sdk/python",
        "type": "com.example.größe",
        "subject": subject,
        "note": "50% off, \"quoted\", a%20b is not an escape here",
        "count": 7,
        "flag": True,
    }


def expected_binary(headers, body):
    """The event a binding-conformant receiver reads from these headers."""
    event = {}
    for name, value in headers.items():
        name = name.lower()
        if name.startswith("ce-"):
            event[name[3:]] = urllib.parse.unquote(str(value))
        elif name == "content-type":
            event["datacontenttype"] = value
    ct = event.get("datacontenttype", "")
    if body:
        if "json" in ct:
            event["data"] = json.loads(body)
        elif ct.startswith("text/"):
            event["data"] = body.decode()
        else:
            event["data_base64"] = base64.b64encode(body).decode()
    return event


def send(case, headers, body, expect, latin1=False):
    if latin1:
        req = urllib.request.Request(url, data=body, method="POST")
        for k, v in headers.items():
            req.add_header(k, str(v))
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                status, answer = r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            status, answer = e.code, json.loads(e.read())
    else:
        raw = {k: str(v).encode() for k, v in headers.items()}
        r = client.post(url, headers=raw, content=body)
        status, answer = r.status_code, r.json()
    print(json.dumps({"case": case, "status": status, "answer": answer, "expect": expect}))


subject = 'größe "q" 100% € 😀'
for kind, (data, ct) in DATA.items():
    # The v1 API: header values raw, extension values of any type.
    case = f"py-v1-binary-{kind}"
    headers, body = v1_binary(V1Event(dict(attributes(case, subject), datacontenttype=ct), data))
    send(case, headers, body, expected_binary(headers, body))
    case = f"py-v1-structured-{kind}"
    headers, body = v1_structured(V1Event(dict(attributes(case, subject), datacontenttype=ct), data))
    send(case, headers, body, json.loads(body))
    # The core API: header values percent-encoded.
    when = datetime(2026, 12, 6, 10, 0, 0, tzinfo=timezone.utc)
    case = f"py-core-binary-{kind}"
    m = core_http.to_binary(
        CoreEvent(dict(attributes(case, subject), datacontenttype=ct, time=when), data), JSONFormat()
    )
    send(case, m.headers, m.body, expected_binary(m.headers, m.body))
    case = f"py-core-structured-{kind}"
    m = core_http.to_structured(
        CoreEvent(dict(attributes(case, subject), datacontenttype=ct, time=when), data), JSONFormat()
    )
    send(case, m.headers, m.body, json.loads(m.body))

# ISO-8859-1 on the wire: what http.client sends for characters up to U+00FF.
case = "py-v1-binary-latin1"
headers, body = v1_binary(
    V1Event(dict(attributes(case, 'größe "q" 100%'), datacontenttype="application/json"), {"a": 1})
)
send(case, headers, body, expected_binary(headers, body), latin1=True)

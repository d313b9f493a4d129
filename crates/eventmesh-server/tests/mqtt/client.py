"""MQTT clients for the listener's tests, on the Eclipse Paho Python client
(paho-mqtt 2, installed by scripts/mqtt.sh).

Every command takes --ws: MQTT over WebSocket (`/mqtt`), --port then
being the HTTP port.

Each command prints one JSON line per step ({"step": ...}) and exits 0;
anything unexpected (a refusal that was not asked for, a timeout) exits 1
with the reason on stderr.

  listen   --port P --version 4|5 --topic F [--topic F2] --qos Q --count N
           [--client-id ID] [--persistent] [--expiry S] [--password T]
           [--until-payload TEXT] [--no-local] [--publish-first TEXT]
      connects, subscribes, prints {"step":"subscribed","granted":[...],
      "sessionPresent":b}, then {"step":"message",...} for each message
      until N came (or one with payload TEXT), then disconnects. With
      --publish-first, publishes TEXT (QoS 1) to the first filter once
      subscribed, before it says so.
  resume   like listen, without subscribing (a persistent session's own
           subscriptions deliver).
  publish  --port P --version 4|5 --topic T --qos Q --payload TEXT
           [--retain] [--props JSON] [--password T] [--client-id ID]
           [--repeat N [--numbered]]
      prints {"step":"published","reason":code} once acknowledged (QoS 0:
      once written); --repeat publishes N times, one after the other, each
      payload numbered from 0 with --numbered.
  connect  --port P --version 4|5 [--password T] [--client-id ID]
      prints {"step":"connack","reason":code,"sessionPresent":b}.
  will     --port P --version 4|5 --topic T --payload TEXT
           [--will-delay S] [--persistent --expiry S]
      connects with a will, then drops the socket without DISCONNECT.
  respond  --port P --topic F --count N [--payload TEXT]
      (MQTT 5) subscribes at QoS 1, prints {"step":"subscribed"}, then
      answers each of N messages: publishes TEXT (or "re:" and the
      request's payload) at QoS 1 to the message's response topic with its
      correlation data, and prints {"step":"replied","reason":code,
      "responseTopic":...,"correlation":...}.
"""

import argparse
import base64
import json
import sys
import threading
import time

import paho.mqtt.client as mqtt
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

TIMEOUT = 20.0


OUT = threading.Lock()


def out(step, **fields):
    """One JSON line, whole (callbacks run on paho's thread)."""
    fields["step"] = step
    with OUT:
        sys.stdout.write(json.dumps(fields) + "\n")
        sys.stdout.flush()


def fail(why):
    print(why, file=sys.stderr, flush=True)
    sys.exit(1)


def code(rc):
    """A reason code (paho ReasonCode, or an int) as an int."""
    return getattr(rc, "value", rc)


def props_json(p):
    if p is None:
        return {}
    got = {}
    for name in ("ContentType", "ResponseTopic", "MessageExpiryInterval", "PayloadFormatIndicator"):
        if hasattr(p, name):
            got[name] = getattr(p, name)
    if hasattr(p, "CorrelationData"):
        got["CorrelationData"] = p.CorrelationData.decode("utf-8", "replace")
    if hasattr(p, "UserProperty"):
        got["UserProperty"] = [list(kv) for kv in p.UserProperty]
    if hasattr(p, "SubscriptionIdentifier"):
        got["SubscriptionIdentifier"] = p.SubscriptionIdentifier
    return got


def client(a, **kw):
    version = mqtt.MQTTv5 if a.version == 5 else mqtt.MQTTv311
    cid = getattr(a, "client_id", None) or ""
    args = dict(callback_api_version=mqtt.CallbackAPIVersion.VERSION2, client_id=cid, protocol=version)
    if version == mqtt.MQTTv311:
        args["clean_session"] = not getattr(a, "persistent", False)
    if getattr(a, "ws", False):
        kw["transport"] = "websockets"
    c = mqtt.Client(**args, **kw)
    if getattr(a, "ws", False):
        c.ws_set_options(path="/mqtt")
    if getattr(a, "password", None):
        c.username_pw_set("device", a.password)
    return c


def connect(c, a, will=None):
    done = threading.Event()
    result = {}

    def on_connect(cl, userdata, flags, rc, properties=None):
        result["reason"] = code(rc)
        result["sessionPresent"] = bool(flags.session_present)
        done.set()

    c.on_connect = on_connect
    props = None
    clean = mqtt.MQTT_CLEAN_START_FIRST_ONLY
    if a.version == 5:
        props = Properties(PacketTypes.CONNECT)
        if getattr(a, "persistent", False):
            props.SessionExpiryInterval = getattr(a, "expiry", 300)
            clean = False
        else:
            clean = True
    if will is not None:
        will_props = None
        if a.version == 5 and getattr(a, "will_delay", None):
            will_props = Properties(PacketTypes.WILLMESSAGE)
            will_props.WillDelayInterval = a.will_delay
        c.will_set(will[0], will[1], qos=1, properties=will_props)
    kwargs = {"keepalive": 30}
    if a.version == 5:
        kwargs["clean_start"] = clean
        kwargs["properties"] = props
    c.connect("127.0.0.1", a.port, **kwargs)
    c.loop_start()
    if not done.wait(TIMEOUT):
        fail("no CONNACK")
    return result


def listen(a, subscribe=True):
    msgs = []
    got = threading.Event()
    lock = threading.Lock()

    def on_message(cl, userdata, msg):
        payload = msg.payload
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        item = {
            "topic": msg.topic,
            "qos": msg.qos,
            "retain": bool(msg.retain),
            "payload": text,
            "payloadBase64": base64.b64encode(payload).decode(),
            "props": props_json(getattr(msg, "properties", None)),
        }
        with lock:
            msgs.append(item)
            out("message", **item)
            if len(msgs) >= a.count or (a.until_payload is not None and text == a.until_payload):
                got.set()

    c = client(a)
    c.on_message = on_message
    subscribed = threading.Event()
    granted = {}

    def on_subscribe(cl, userdata, mid, reason_codes, properties=None):
        granted["codes"] = [code(r) for r in reason_codes]
        subscribed.set()

    c.on_subscribe = on_subscribe

    def on_disconnect(cl, userdata, flags, rc, properties=None):
        granted["disconnect"] = code(rc)
        subscribed.set()

    c.on_disconnect = on_disconnect
    connack = connect(c, a)
    if connack["reason"] != 0:
        fail(f"CONNACK {connack['reason']}")
    if subscribe:
        opts = lambda: SubscribeOptions(qos=a.qos, noLocal=a.no_local)  # noqa: E731
        topics = [(t, opts() if a.version == 5 else a.qos) for t in a.topic]
        props = None
        if a.version == 5 and a.sub_id:
            props = Properties(PacketTypes.SUBSCRIBE)
            props.SubscriptionIdentifier = a.sub_id
        c.subscribe(topics, properties=props) if props else c.subscribe(topics)
        if not subscribed.wait(TIMEOUT):
            fail("no SUBACK")
        if "disconnect" in granted:
            fail(f"disconnected with reason {granted['disconnect']} instead of a SUBACK")
    if a.publish_first:
        acked, result = track_acks(c)
        c.publish(a.topic[0], a.publish_first.encode(), qos=1)
        if not acked.wait(TIMEOUT):
            fail("no acknowledgement of the own publish")
    out("subscribed", granted=granted.get("codes", []), sessionPresent=connack["sessionPresent"])
    if a.count > 0 and not got.wait(TIMEOUT):
        fail(f"only {len(msgs)} of {a.count} messages came")
    c.disconnect()
    c.loop_stop()


def track_acks(c):
    """An event set at each publish acknowledged, and a dict holding the
    last reason code."""
    acked = threading.Event()
    result = {}

    def on_publish(cl, userdata, mid, rc, properties=None):
        result["reason"] = code(rc)
        acked.set()

    c.on_publish = on_publish
    return acked, result


def publish(a):
    c = client(a)
    connack = connect(c, a)
    if connack["reason"] != 0:
        out("connack", reason=connack["reason"])
        return
    acked, result = track_acks(c)
    props = None
    if a.version == 5 and a.props:
        props = Properties(PacketTypes.PUBLISH)
        for k, v in json.loads(a.props).items():
            if k == "UserProperty":
                props.UserProperty = [tuple(x) for x in v]
            elif k == "CorrelationData":
                props.CorrelationData = v.encode()
            else:
                setattr(props, k, v)
    disconnected = threading.Event()

    def on_disconnect(cl, userdata, flags, rc, properties=None):
        result.setdefault("disconnect", code(rc))
        disconnected.set()
        acked.set()

    c.on_disconnect = on_disconnect
    for i in range(a.repeat):
        acked.clear()
        payload = f"{a.payload}{i}" if a.numbered else a.payload
        c.publish(a.topic, payload.encode(), qos=a.qos, retain=a.retain, properties=props)
        if not acked.wait(TIMEOUT):
            fail("no acknowledgement")
        if "disconnect" in result:
            break
    out("published", reason=result.get("reason"), disconnect=result.get("disconnect"))
    c.disconnect()
    c.loop_stop()


def connect_only(a):
    c = client(a)
    r = connect(c, a)
    out("connack", reason=r["reason"], sessionPresent=r["sessionPresent"])
    c.disconnect()
    c.loop_stop()


def will(a):
    c = client(a)
    r = connect(c, a, will=(a.topic, a.payload.encode()))
    if r["reason"] != 0:
        fail(f"CONNACK {r['reason']}")
    out("connected")
    # Gone without DISCONNECT: the socket just closes.
    c.socket().close()
    c.loop_stop()
    out("dropped")


def respond(a):
    c = client(a)
    todo = []
    have = threading.Condition()

    def on_message(cl, userdata, msg):
        with have:
            todo.append(msg)
            have.notify()

    c.on_message = on_message
    acked, result = track_acks(c)
    subscribed = threading.Event()
    c.on_subscribe = lambda *args, **kw: subscribed.set()
    connack = connect(c, a)
    if connack["reason"] != 0:
        fail(f"CONNACK {connack['reason']}")
    c.subscribe([(a.topic[0], SubscribeOptions(qos=1))])
    if not subscribed.wait(TIMEOUT):
        fail("no SUBACK")
    out("subscribed")
    for _ in range(a.count):
        with have:
            if not have.wait_for(lambda: todo, TIMEOUT):
                fail("no request came")
            msg = todo.pop(0)
        p = msg.properties
        if not hasattr(p, "ResponseTopic"):
            fail(f"a request without a response topic: {props_json(p)}")
        reply = Properties(PacketTypes.PUBLISH)
        if hasattr(p, "CorrelationData"):
            reply.CorrelationData = p.CorrelationData
        payload = a.payload.encode() if a.payload else b"re:" + msg.payload
        acked.clear()
        c.publish(p.ResponseTopic, payload, qos=1, properties=reply)
        if not acked.wait(TIMEOUT):
            fail("no acknowledgement of the reply")
        correlation = p.CorrelationData.decode() if hasattr(p, "CorrelationData") else None
        out("replied", reason=result["reason"], responseTopic=p.ResponseTopic, correlation=correlation)
    c.disconnect()
    c.loop_stop()


def main():
    global TIMEOUT
    p = argparse.ArgumentParser()
    p.add_argument("command")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--version", type=int, default=5)
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--qos", type=int, default=0)
    p.add_argument("--count", type=int, default=1)
    p.add_argument("--client-id")
    p.add_argument("--persistent", action="store_true")
    p.add_argument("--expiry", type=int, default=300)
    p.add_argument("--password")
    p.add_argument("--payload", default="")
    p.add_argument("--retain", action="store_true")
    p.add_argument("--props")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--sub-id", type=int)
    p.add_argument("--until-payload")
    p.add_argument("--will-delay", type=int)
    p.add_argument("--no-local", action="store_true")
    p.add_argument("--ws", action="store_true")
    p.add_argument("--numbered", action="store_true")
    p.add_argument("--publish-first")
    p.add_argument("--timeout", type=float, default=TIMEOUT)
    a = p.parse_args()
    TIMEOUT = a.timeout
    if a.command == "listen":
        listen(a)
    elif a.command == "resume":
        listen(a, subscribe=False)
    elif a.command == "publish":
        a.topic = a.topic[0]
        publish(a)
    elif a.command == "connect":
        connect_only(a)
    elif a.command == "respond":
        respond(a)
    elif a.command == "will":
        a.topic = a.topic[0]
        will(a)
    else:
        fail(f"unknown command {a.command}")


if __name__ == "__main__":
    main()

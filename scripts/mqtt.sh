#!/usr/bin/env bash
# Makes sure the MQTT client the MQTT listener's tests drive is installed:
# the Eclipse Paho Python client (paho-mqtt 2) in a venv (MQTT_VENV,
# default /var/tmp/mqtt-venv). Prints the venv's python. The tests also
# run mosquitto_pub and mosquitto_sub, which scripts/deps.sh installs.
set -euo pipefail
venv="${MQTT_VENV:-/var/tmp/mqtt-venv}"
py="$venv/bin/python"

have() { "$py" -c 'import paho.mqtt.client, paho.mqtt.properties' >/dev/null 2>&1; }
if ! { [ -x "$py" ] && have; }; then
  echo "installing paho-mqtt from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'paho-mqtt>=2.1,<3' >&2
fi
if ! have; then
  echo "paho-mqtt is not importable from $py" >&2
  exit 1
fi
echo "$py"

#!/usr/bin/env bash
# Makes sure Selenium (the WebDriver client the dashboard's browser tests
# drive headless Chromium with) is installed in a venv (BROWSER_VENV,
# default /var/tmp/browser-venv) and prints the venv's python. Chromium and
# its driver come from Debian (scripts/deps.sh).
set -euo pipefail
venv="${BROWSER_VENV:-/var/tmp/browser-venv}"
py="$venv/bin/python"
have() { "$py" -c 'import selenium.webdriver' >/dev/null 2>&1; }
if ! { [ -x "$py" ] && have; }; then
  echo "installing selenium from PyPI into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q 'selenium>=4.20,<5' >&2
fi
if ! have; then
  echo "selenium is not importable from $py" >&2
  exit 1
fi
echo "$py"

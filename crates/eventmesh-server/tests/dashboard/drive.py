"""Drives the dashboard in headless Chromium (Selenium), as an operator
would: a wrong token, signing in, watching the publish rate move while
events are published, a topic's lag, replaying a consumer group after its
confirmation, replaying a dead letter, a link to another cluster up, and
every page once, with a screenshot of each.

Usage: drive.py ADMIN_URL TRAFFIC_URL TOKEN SCREENSHOT_DIR DLQ_ID
Prints one JSON object with what it saw; exits non-zero on a failed check.
"""

import json
import sys
import threading
import time
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

ADMIN, TRAFFIC, TOKEN, SHOTS, DLQ_ID = sys.argv[1:6]
WAIT = 30
seen = {}


def check(cond, what):
    if not cond:
        raise SystemExit(f"check failed: {what}")


def browser():
    o = webdriver.ChromeOptions()
    o.binary_location = "/usr/bin/chromium"
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
              "--window-size=1280,900", "--force-device-scale-factor=1"]:
        o.add_argument(a)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=o)


def until(d, f, what):
    try:
        # Pages redraw on every poll: an element may go stale between
        # finding and reading it; the next try finds the new one.
        return WebDriverWait(d, WAIT, poll_frequency=0.1,
                             ignored_exceptions=[StaleElementReferenceException]).until(
            lambda _: f())
    except Exception as e:
        raise SystemExit(f"timed out waiting for {what}: {e}")


def find(d, css):
    els = d.find_elements(By.CSS_SELECTOR, css)
    return els[0] if els else None


def text_of(d, css):
    el = find(d, css)
    return el.text.strip() if el is not None and el.is_displayed() else None


def shot(d, name):
    time.sleep(0.3)  # let the last poll's drawing settle before the picture
    d.save_screenshot(f"{SHOTS}/dashboard-{name}.png")


def page(d, name, ready_css):
    d.find_element(By.CSS_SELECTOR, f'a[data-page="{name}"]').click()
    until(d, lambda: find(d, ready_css) is not None, f"the {name} page")


def publish_for(seconds, stop):
    """Publishes to topic `live` at about 50 events/s until `stop`."""
    n = 0
    end = time.time() + seconds
    while time.time() < end and not stop.is_set():
        body = json.dumps({"specversion": "1.0", "id": f"live-{n}", "source": "/ui-test",
                           "type": "t", "data": {"n": n}}).encode()
        req = urllib.request.Request(f"{TRAFFIC}/events/publish?topic=live", data=body,
                                     method="POST",
                                     headers={"content-type": "application/cloudevents+json"})
        urllib.request.urlopen(req, timeout=10).read()
        n += 1
        time.sleep(0.02)
    seen["published_live"] = n


d = browser()
try:
    # A wrong token: a clear error, still signed out.
    d.get(f"{ADMIN}/ui/")
    until(d, lambda: find(d, "#token") is not None and find(d, "#token").is_displayed(),
          "the sign-in form")
    d.find_element(By.ID, "token").send_keys("not-the-token")
    d.find_element(By.ID, "sign-in").click()
    until(d, lambda: text_of(d, "#sign-in-error"), "the sign-in error")
    seen["wrong_token_error"] = text_of(d, "#sign-in-error")
    shot(d, "signin-error")

    # The right one.
    tok = d.find_element(By.ID, "token")
    tok.clear()
    tok.send_keys(TOKEN)
    d.find_element(By.ID, "sign-in").click()
    until(d, lambda: find(d, "#chart-publish") is not None, "the overview")

    # A live rate that moves while events are published.
    stop = threading.Event()
    t = threading.Thread(target=publish_for, args=(20, stop))
    t.start()
    rate = until(d, lambda: (lambda v: v if v and float(v) > 0 else None)(
        text_of(d, '#chart-publish [data-field="publish-rate"]')), "a publish rate above 0")
    seen["publish_rate"] = float(rate)
    # A few more samples, so the picture shows a line.
    until(d, lambda: (find(d, "#chart-publish path.line") is not None
                      and find(d, "#chart-publish path.line").get_attribute("d").count("L") >= 5),
          "six samples of the publish rate")
    shot(d, "overview")
    stop.set()
    t.join()

    # A topic and its lag.
    page(d, "topics", "#topics-table")
    lag = until(d, lambda: text_of(d, 'tr[data-topic="orders"] [data-field="lag"]'),
                "the lag of orders")
    seen["orders_lag"] = int(lag.replace(",", ""))
    shot(d, "topics")
    d.get(f"{ADMIN}/ui/#/topics/orders")
    until(d, lambda: find(d, "#partitions-table") is not None, "the topic page")
    shot(d, "topic")

    # A group replayed from its oldest event, after a confirmation that
    # says how many events come again.
    d.get(f"{ADMIN}/ui/#/topics/replayed")
    replay = 'tr[data-consumer="r"] [data-action="replay-group"]'
    until(d, lambda: find(d, replay) is not None, "the replay button of group r")
    d.find_element(By.CSS_SELECTOR, replay).click()
    until(d, lambda: find(d, "#replay-form") is not None and find(d, "#replay-form").is_displayed(),
          "the replay form")
    Select(d.find_element(By.ID, "replay-target")).select_by_value("earliest")
    d.find_element(By.ID, "replay-submit").click()
    seen["replay_confirm"] = until(d, lambda: text_of(d, "#confirm-text"), "the confirmation")
    shot(d, "replay-confirm")
    d.find_element(By.ID, "confirm-ok").click()
    seen["replay_notice"] = until(d, lambda: text_of(d, "#topic-notice"), "the reset's outcome")

    # A dead letter, replayed.
    page(d, "deadletters", "#dlq-topic")
    Select(d.find_element(By.ID, "dlq-topic")).select_by_value("pay")
    row = f'tr[data-dlq-id="{DLQ_ID}"]'
    until(d, lambda: find(d, row) is not None, "the dead letter's row")
    d.find_element(By.CSS_SELECTOR, f'{row} [data-action="toggle-event"]').click()
    until(d, lambda: text_of(d, f'tr[data-dlq-event="{DLQ_ID}"]'), "the event's body")
    seen["dlq_event_shown"] = json.loads(text_of(d, f'tr[data-dlq-event="{DLQ_ID}"]'))["id"]
    shot(d, "deadletters")
    d.find_element(By.CSS_SELECTOR, f"{row} input.dlq-check").click()
    d.find_element(By.ID, "replay-selected").click()
    if find(d, "#confirm-ok") is not None and find(d, "#confirm-ok").is_displayed():
        d.find_element(By.ID, "confirm-ok").click()
    until(d, lambda: (find(d, "#dlq-outcome") is not None
                      and find(d, "#dlq-outcome").get_attribute("data-replayed") == "1"),
          "the replay's outcome")
    seen["replay_outcome"] = until(d, lambda: text_of(d, "#dlq-outcome"), "the outcome's text")

    # Every other page once.
    page(d, "subscriptions", "#clients-table")
    until(d, lambda: find(d, 'tr[data-client="slow"]') is not None, "the client slow")

    def picky_filters():
        for row in d.find_elements(By.CSS_SELECTOR, "#subscriptions-table tr[data-subscription]"):
            if "picky" in row.text:
                cells = row.find_elements(By.CSS_SELECTOR, 'td[data-field="filters"]')
                return cells[0].text if cells else None
        return None
    seen["picky_filters"] = until(d, picky_filters, "the filters of the subscription picky")

    def wide_topics():
        for row in d.find_elements(By.CSS_SELECTOR, "#subscriptions-table tr[data-subscription]"):
            if "orders.*" in row.text:
                cells = row.find_elements(By.CSS_SELECTOR, 'td[data-field="attachedTopics"]')
                return cells[0].text if cells and "orders.us" in cells[0].text else None
        return None
    seen["wide_topics"] = until(d, wide_topics, "the topics the pattern orders.* follows")
    shot(d, "subscriptions")
    page(d, "connectors", 'tr[data-connector="hook"]')
    seen["connector_state"] = until(
        d, lambda: text_of(d, 'tr[data-connector="hook"] [data-field="state"]'), "its state")
    shot(d, "connectors")
    page(d, "links", 'tr[data-link="to-b"]')
    link = 'tr[data-link="to-b"] [data-field="%s"]'
    seen["link_state"] = until(
        d, lambda: (lambda t: t if t == "UP" else None)(text_of(d, link % "state")),
        "the link to-b up")
    seen["link_remote"] = text_of(d, link % "remote")
    shot(d, "links")
    page(d, "cluster", "#single-node")
    shot(d, "cluster")
    page(d, "tasks", "#task-counts")
    shot(d, "tasks")
    page(d, "config", '#config-table tr[data-key="eventmesh.admin.token"]')
    seen["token_shown_as"] = until(
        d, lambda: text_of(d, '#config-table tr[data-key="eventmesh.admin.token"]'),
        "the token's row")
    shot(d, "config")
finally:
    d.quit()

print(json.dumps(seen))

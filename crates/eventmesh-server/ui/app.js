// eventmesh admin dashboard.
//
// A single script, no dependencies. Every page reads the admin API of the
// same origin with the admin token held in sessionStorage. The current
// page's data is polled every two seconds; other pages are not polled.
//
// Sections:
//   1. DOM and formatting helpers
//   2. The admin API client (token, errors, sign-out on 401)
//   3. Prometheus / OpenMetrics text parsing and histogram quantiles
//   4. SVG line charts
//   5. The shell: sign-in, routing, polling, error banner, confirmations
//   6. Pages: overview, topics, topic, subscriptions, dead letters,
//      cluster, connectors, links, A2A tasks, config
'use strict';

const POLL_MS = 2000;
const WINDOW_MS = 5 * 60 * 1000;
const TOKEN_KEY = 'eventmesh.adminToken';
const MSG_REJECTED = 'The admin token was not accepted.';
const MSG_LOCKED =
  'No admin token is configured on this server (eventmesh.admin.token): the admin API is locked.';

// ---------------------------------------------------------------------------
// 1. DOM and formatting helpers
// ---------------------------------------------------------------------------

const $ = (sel, root = document) => root.querySelector(sel);

// Properties set directly on the element rather than as attributes.
const PROPS = new Set(['value', 'checked', 'disabled', 'open', 'hidden', 'indeterminate', 'selected']);

// Builds an element. Children are nodes or values; values become text nodes,
// so data is never parsed as HTML.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  appendAll(el, children);
  return el;
}

// Builds an SVG element (same rules as h).
function s(tag, attrs, ...children) {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  setAttrs(el, attrs);
  appendAll(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (PROPS.has(k)) el[k] = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function appendAll(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// Replaces the children of an element.
function fill(el, ...children) {
  el.replaceChildren();
  appendAll(el, children);
  return el;
}

const isNum = (v) => typeof v === 'number' && Number.isFinite(v);

function fmtInt(n) {
  return isNum(n) ? String(Math.round(n)) : '—';
}

// A rate or small measure: more decimals for small values.
function fmtRate(v) {
  if (!isNum(v)) return '—';
  const a = Math.abs(v);
  if (a >= 100) return v.toFixed(0);
  if (a >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

// Bytes in binary units; `zero` names what 0 means (e.g. "none").
function fmtBytes(n, zero) {
  if (!isNum(n)) return '—';
  if (n === 0 && zero) return zero;
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v >= 100 ? v.toFixed(0) : v.toFixed(1).replace(/\.0$/, '')} ${units[i]}`;
}

// A duration in milliseconds, at most two units ("1 d 12 h", "250 ms").
function fmtDuration(ms, zero) {
  if (!isNum(ms)) return '—';
  if (ms === 0 && zero) return zero;
  if (ms < 1000) return `${ms} ms`;
  const units = [['d', 86400000], ['h', 3600000], ['min', 60000], ['s', 1000]];
  const parts = [];
  let rest = ms;
  for (const [name, size] of units) {
    if (rest >= size) {
      parts.push(`${Math.floor(rest / size)} ${name}`);
      rest %= size;
    }
    if (parts.length === 2) break;
    if (parts.length === 1 && rest < 1000) break;
  }
  return parts.join(' ');
}

const pad2 = (n) => String(n).padStart(2, '0');

// Wall-clock time of a timestamp in ms: time today, date and time otherwise.
function fmtTime(ms) {
  if (!isNum(ms) || ms <= 0) return '—';
  const d = new Date(ms);
  const time = `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${time}`;
}

function fmtAgo(ms) {
  const secs = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (secs < 60) return `${secs}s ago`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
  return `${Math.floor(secs / 86400)} d ago`;
}

// A <time> element with the ISO date and relative age in its tooltip.
function timeCell(ms) {
  if (!isNum(ms) || ms <= 0) return h('span', { class: 'muted' }, '—');
  return h('time', { datetime: new Date(ms).toISOString(), title: `${new Date(ms).toISOString()} (${fmtAgo(ms)})` }, fmtTime(ms));
}

// "clientId" -> "Client id"; known names get nicer labels.
const LABELS = {
  clientId: 'Client', createdMs: 'Created', updatedMs: 'Updated', subscriptionId: 'Subscription id',
  url: 'URL', inflight: 'In flight', sinceMs: 'Since', leaseMs: 'Lease', adminAddress: 'Admin address',
  ownedPartitions: 'Owned partitions', contextId: 'Context', tls: 'TLS', from: 'Starts from',
};
function label(key) {
  if (LABELS[key]) return LABELS[key];
  const words = key.replace(/([a-z0-9])([A-Z])/g, '$1 $2').replace(/[_-]+/g, ' ').toLowerCase();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

// Any JSON value rendered for a table cell.
function valueNode(v, key) {
  if (v === null || v === undefined || v === '') return h('span', { class: 'muted' }, '—');
  if (typeof v === 'boolean') return badge(v ? 'yes' : 'no', v ? 'ok' : 'muted');
  if (typeof v === 'number' && key && /Ms$/.test(key) && v > 1e11) return timeCell(v);
  if (typeof v === 'object') return h('code', { class: 'json' }, JSON.stringify(v));
  if (v === '******') return h('span', { class: 'secret' }, v);
  return String(v);
}

// State words mapped to badge tones.
const TONES = {
  ok: ['up', 'ready', 'running', 'completed', 'ok', 'yes', 'registered', 'load_balance', 'webhook'],
  warn: ['draining', 'paused', 'retrying', 'starting', 'connecting', 'input_required', 'auth_required', 'handover', 'not_ready'],
  bad: ['down', 'failed', 'rejected', 'error', 'not registered'],
  info: ['working', 'submitted', 'broadcast', 'poll', 'default', 'topic'],
};
function toneOf(state) {
  const k = String(state).toLowerCase();
  for (const [tone, words] of Object.entries(TONES)) if (words.includes(k)) return tone;
  return 'muted';
}
function badge(text, tone) {
  return h('span', { class: `badge badge-${tone || toneOf(text)}` }, text);
}

// "TASK_STATE_INPUT_REQUIRED" -> "input_required".
const taskState = (s) => String(s || 'unknown').replace(/^TASK_STATE_/, '').toLowerCase();

// A table: columns are { key, label, num, render(row) }.
function table(columns, rows, opts = {}) {
  const head = h('tr', null, columns.map((c) => h('th', { class: c.num ? 'num' : null, scope: 'col' }, c.label ?? label(c.key))));
  const body = h('tbody', null, rows.map((row) => h('tr', opts.rowAttrs ? opts.rowAttrs(row) : null,
    columns.map((c) => h('td', { class: c.num ? 'num' : null, 'data-field': c.field || null },
      c.render ? c.render(row) : valueNode(row[c.key], c.key))))));
  return h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: opts.id || null }, h('thead', null, head), body));
}

// Columns for objects whose fields are not known in advance: `known` first
// (those present), then every other key found in any row.
function genericColumns(rows, known, overrides = {}) {
  const keys = [];
  for (const k of known) if (rows.some((r) => r && k in r)) keys.push(k);
  for (const r of rows) for (const k of Object.keys(r || {})) if (!keys.includes(k)) keys.push(k);
  return keys.map((key) => overrides[key] || { key, num: rows.some((r) => isNum(r[key]) && !/Ms$/.test(key)) });
}

// "1 partition", "3 partitions".
const plural = (n, word) => `${fmtInt(n)} ${word}${n === 1 ? '' : 's'}`;

function emptyState(text, id) {
  return h('div', { class: 'empty', id: id || null }, text);
}
function loading() {
  return h('div', { class: 'loading' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Loading…');
}
function card(title, ...body) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title' }, title) : null, ...body);
}
// A labelled figure; its value is in [data-field=field] ("—" until set).
function stat(labelText, field, unit, value = '—') {
  return h('div', { class: 'stat' },
    h('div', { class: 'stat-label' }, labelText),
    h('div', { class: 'stat-value' }, h('span', { 'data-field': field }, value),
      unit ? h('span', { class: 'unit' }, unit) : null));
}
// A button; `cls` adds to the "btn" class.
function button(text, cls, onclick, attrs = {}) {
  return h('button', { type: 'button', class: `btn ${cls || ''}`.trim(), onclick, ...attrs }, text);
}
function setField(root, field, text) {
  const el = root.querySelector(`[data-field="${field}"]`);
  if (el) el.textContent = text;
}

// ---------------------------------------------------------------------------
// 2. The admin API client
// ---------------------------------------------------------------------------

class ApiError extends Error {
  constructor(method, path, status, code, message) {
    super(message);
    this.method = method;
    this.path = path;
    this.status = status;
    this.code = code;
  }
}

const getToken = () => sessionStorage.getItem(TOKEN_KEY);

// Calls the admin API. Answers { status, data } for 2xx and for the statuses
// in `allow`; throws ApiError otherwise. A 401 (or a locked admin API) signs
// out, unless `token` is given (the sign-in check).
async function api(path, opts = {}) {
  const { method = 'GET', body, auth = true, allow = [], text = false, token } = opts;
  const headers = { Accept: text ? 'text/plain' : 'application/json' };
  if (auth) headers.Authorization = `Bearer ${token ?? getToken() ?? ''}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch(path, { method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body) });
  } catch (e) {
    throw new ApiError(method, path, 0, 'network', `The server could not be reached (${e.message}).`);
  }
  const raw = await res.text();
  let data = raw;
  if (!(text && res.ok)) {
    try { data = raw ? JSON.parse(raw) : null; } catch { data = null; }
  }
  const code = data && typeof data === 'object' && typeof data.error === 'string' ? data.error : null;
  if (auth && token === undefined) {
    if (res.status === 401) { signOut(MSG_REJECTED); throw new ApiError(method, path, 401, 'unauthorized', MSG_REJECTED); }
    if (res.status === 503 && code === 'admin_locked') { signOut(MSG_LOCKED); throw new ApiError(method, path, 503, code, MSG_LOCKED); }
  }
  if (res.ok || allow.includes(res.status)) return { status: res.status, ok: res.ok, data };
  const message = (data && typeof data === 'object' && data.message) || raw.slice(0, 300) || res.statusText;
  throw new ApiError(method, path, res.status, code || `http_${res.status}`, message);
}

const enc = encodeURIComponent;

// Every topic with its detail (offsets, consumers, lag). A topic deleted
// between the two calls is left out.
async function topicsWithDetails() {
  const list = (await api('/admin/topics')).data || [];
  const details = await Promise.all(list.map((t) => api(`/admin/topics/${enc(t.name)}`, { allow: [404] })));
  return list.map((t, i) => ({ ...t, detail: details[i].ok ? details[i].data : null }));
}

const topicLag = (detail) => (detail && Array.isArray(detail.consumers) ? detail.consumers.reduce((a, c) => a + (c.lag || 0), 0) : 0);

// ---------------------------------------------------------------------------
// 3. Prometheus / OpenMetrics text
// ---------------------------------------------------------------------------

function parseNumber(tok) {
  switch (tok) {
    case '+Inf': case 'Inf': case '+inf': case 'inf': return Infinity;
    case '-Inf': case '-inf': return -Infinity;
    case 'NaN': case 'nan': return NaN;
    default: return tok === '' ? NaN : Number(tok);
  }
}

// Reads a quoted string starting at line[i] === '"'; returns [value, next].
function readQuoted(line, i) {
  let out = '';
  for (let j = i + 1; j < line.length; j++) {
    const c = line[j];
    if (c === '\\' && j + 1 < line.length) {
      const n = line[++j];
      out += n === 'n' ? '\n' : n; // \\ -> \, \" -> ", \n -> newline
    } else if (c === '"') {
      return [out, j + 1];
    } else {
      out += c;
    }
  }
  throw new Error('unterminated string');
}

// One sample line: `name{label="v",...} value [timestamp] [# exemplar]`.
// Also accepts a quoted metric name inside the braces (`{"name",a="b"}`).
function parseSampleLine(line) {
  let i = 0;
  while (i < line.length && !/[\s{]/.test(line[i])) i++;
  let name = line.slice(0, i);
  const labels = {};
  if (line[i] === '{') {
    i++;
    for (;;) {
      while (line[i] === ' ' || line[i] === ',') i++;
      if (line[i] === '}') { i++; break; }
      if (i >= line.length) throw new Error('unterminated labels');
      let key;
      if (line[i] === '"') [key, i] = readQuoted(line, i);
      else {
        const start = i;
        while (i < line.length && !/[=\s,}]/.test(line[i])) i++;
        key = line.slice(start, i);
      }
      while (line[i] === ' ') i++;
      if (line[i] !== '=') { name = name || key; continue; } // a quoted metric name
      i++;
      while (line[i] === ' ') i++;
      if (line[i] !== '"') throw new Error('label value not quoted');
      let value;
      [value, i] = readQuoted(line, i);
      labels[key] = value;
    }
  }
  if (!name) throw new Error('no metric name');
  const rest = line.slice(i).split(' # ')[0].trim().split(/\s+/);
  const value = parseNumber(rest[0] ?? '');
  if (rest[0] === undefined || (Number.isNaN(value) && rest[0] !== 'NaN')) throw new Error('bad value');
  return { name, labels, value };
}

// Parses the whole exposition: { samples: [{name, labels, value}], types }.
// Malformed lines are skipped rather than failing the whole scrape.
function parseMetrics(text) {
  const samples = [];
  const types = {};
  for (const rawLine of String(text).split('\n')) {
    const line = rawLine.trim();
    if (!line) continue;
    if (line.startsWith('#')) {
      const m = /^#\s+TYPE\s+(\S+)\s+(\S+)/.exec(line);
      if (m) types[m[1]] = m[2];
      continue;
    }
    try { samples.push(parseSampleLine(line)); } catch { /* skip the line */ }
  }
  return { samples, types };
}

// Sum of every series of a metric (null when absent).
function metricSum(parsed, name) {
  let total = null;
  for (const smp of parsed.samples) if (smp.name === name && Number.isFinite(smp.value)) total = (total ?? 0) + smp.value;
  return total;
}

// A histogram's cumulative buckets summed over label sets: [{le, count}]
// sorted by bound, +Inf last; null when absent.
function histogram(parsed, base) {
  const byLe = new Map();
  for (const smp of parsed.samples) {
    if (smp.name !== `${base}_bucket` || smp.labels.le === undefined) continue;
    const le = parseNumber(smp.labels.le);
    if (Number.isNaN(le)) continue;
    byLe.set(le, (byLe.get(le) ?? 0) + smp.value);
  }
  if (byLe.size === 0) return null;
  return [...byLe.entries()].sort((a, b) => a[0] - b[0]).map(([le, count]) => ({ le, count }));
}

// Quantile q of the observations between two cumulative-bucket snapshots,
// interpolating linearly inside the bucket (as histogram_quantile does).
// Null when nothing was observed in between or a counter went back.
function quantileBetween(prev, cur, q) {
  if (!prev || !cur || prev.length !== cur.length) return null;
  const deltas = cur.map((b, i) => ({ le: b.le, count: b.count - prev[i].count }));
  if (deltas.some((d, i) => d.count < 0 || d.le !== prev[i].le)) return null;
  const total = deltas[deltas.length - 1].count;
  if (!(total > 0)) return null;
  const rank = q * total;
  for (let i = 0; i < deltas.length; i++) {
    if (deltas[i].count >= rank) {
      const lower = i === 0 ? 0 : deltas[i - 1].le;
      const below = i === 0 ? 0 : deltas[i - 1].count;
      const upper = deltas[i].le;
      if (upper === Infinity) return lower; // beyond the last finite bound
      const inBucket = deltas[i].count - below;
      if (inBucket <= 0) return upper;
      return lower + (upper - lower) * ((rank - below) / inBucket);
    }
  }
  return null;
}

// ---------------------------------------------------------------------------
// 4. SVG line charts
// ---------------------------------------------------------------------------

// A "nice" step (1, 2 or 5 times a power of ten) for about `n` ticks to max.
function niceStep(max, n) {
  const raw = max / n;
  const pow = 10 ** Math.floor(Math.log10(raw));
  const f = raw / pow;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * pow;
}

function fmtTick(v) {
  if (v === 0) return '0';
  if (Math.abs(v) >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (Math.abs(v) >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return String(+v.toPrecision(3));
}

// Draws series [{label, points: [[t, v|null], ...]}] over the last five
// minutes into `container`, a y axis in `unit` and clock-time ticks. A null
// value breaks the line. A legend is drawn when there are several series.
function lineChart(container, series, unit, now) {
  const width = Math.max(280, container.clientWidth || 480);
  const height = 190;
  const m = { left: 46, right: 14, top: 24, bottom: 24 };
  const iw = width - m.left - m.right;
  const ih = height - m.top - m.bottom;
  const t0 = now - WINDOW_MS;
  const values = series.flatMap((sr) => sr.points.filter((p) => p[0] >= t0 && isNum(p[1])).map((p) => p[1]));
  const max = Math.max(...values, 0);
  const step = niceStep(max > 0 ? max : 1, 4);
  const yMax = Math.max(step, Math.ceil(max / step) * step);
  const x = (t) => m.left + ((t - t0) / WINDOW_MS) * iw;
  const y = (v) => m.top + ih - (v / yMax) * ih;

  const svg = s('svg', {
    width, height, viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img',
    'aria-label': `${series.map((sr) => sr.label).join(', ')} in ${unit}`,
  });
  // Y grid, tick labels and the unit.
  for (let v = 0; v <= yMax + step / 2; v += step) {
    svg.append(s('line', { class: 'gridline', x1: m.left, x2: width - m.right, y1: y(v), y2: y(v) }));
    svg.append(s('text', { class: 'tick', x: m.left - 6, y: y(v) + 4, 'text-anchor': 'end' }, fmtTick(v)));
  }
  svg.append(s('text', { class: 'axis-title', x: m.left - 6, y: 12, 'text-anchor': 'end' }, unit));
  // X ticks on the minute.
  for (let t = Math.ceil(t0 / 60000) * 60000; t <= now; t += 60000) {
    const d = new Date(t);
    svg.append(s('line', { class: 'gridline gridline-x', x1: x(t), x2: x(t), y1: m.top, y2: m.top + ih }));
    svg.append(s('text', { class: 'tick', x: x(t), y: height - 6, 'text-anchor': 'middle' }, `${pad2(d.getHours())}:${pad2(d.getMinutes())}`));
  }
  svg.append(s('line', { class: 'axis', x1: m.left, x2: width - m.right, y1: m.top + ih, y2: m.top + ih }));
  // The lines: a new segment after every gap; lone points drawn as dots.
  series.forEach((sr, idx) => {
    let d = '';
    let run = [];
    const flush = () => {
      if (run.length === 1) svg.append(s('circle', { class: `dot s${idx}`, cx: x(run[0][0]), cy: y(run[0][1]), r: 2.5 }));
      run = [];
    };
    for (const [t, v] of sr.points) {
      if (t < t0 || !isNum(v)) { flush(); continue; }
      d += `${run.length ? 'L' : 'M'}${x(t).toFixed(1)},${y(v).toFixed(1)}`;
      run.push([t, v]);
    }
    flush();
    if (d) svg.append(s('path', { class: `line s${idx}`, d }));
  });
  if (values.length === 0) {
    svg.append(s('text', { class: 'chart-empty', x: m.left + iw / 2, y: m.top + ih / 2, 'text-anchor': 'middle' }, 'collecting samples…'));
  }
  // Legend, top right.
  if (series.length > 1) {
    let lx = width - m.right;
    for (let idx = series.length - 1; idx >= 0; idx--) {
      const text = s('text', { class: 'legend', y: 12, 'text-anchor': 'end', x: lx }, series[idx].label);
      lx -= series[idx].label.length * 6.5 + 4;
      const swatch = s('line', { class: `line s${idx}`, x1: lx - 16, x2: lx - 2, y1: 8, y2: 8 });
      svg.append(swatch, text);
      lx -= 30;
    }
  }
  fill(container, svg);
}

// ---------------------------------------------------------------------------
// 5. The shell: sign-in, routing, polling, banner, confirmations
// ---------------------------------------------------------------------------

const shell = { gen: 0, view: null, timer: null, busy: false, again: false, lastJson: null, updatedAt: 0, failed: false };

function showSignIn(message) {
  stopPolling();
  $('#app-view').hidden = true;
  $('#signin-view').hidden = false;
  const err = $('#sign-in-error');
  err.textContent = message || '';
  err.hidden = !message;
  $('#token').value = '';
  $('#token').focus();
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  showSignIn(message);
}

// Checks the token with GET /admin/config before keeping it.
async function signIn(event) {
  event.preventDefault();
  const token = $('#token').value.trim();
  const err = $('#sign-in-error');
  const submit = $('#sign-in');
  if (!token) { err.textContent = 'Enter the admin token.'; err.hidden = false; return; }
  submit.disabled = true;
  submit.textContent = 'Signing in…';
  try {
    const res = await api('/admin/config', { token, allow: [401, 503] });
    if (res.status === 401) throw new Error(MSG_REJECTED);
    if (res.status === 503) {
      throw new Error(res.data?.error === 'admin_locked' ? MSG_LOCKED : `The server answered 503: ${res.data?.message || 'unavailable'}`);
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    err.hidden = true;
    showApp();
  } catch (e) {
    err.textContent = e instanceof ApiError ? `Cannot verify the token: ${e.message}` : e.message;
    err.hidden = false;
  } finally {
    submit.disabled = false;
    submit.textContent = 'Sign in';
  }
}

function showApp() {
  $('#signin-view').hidden = true;
  $('#app-view').hidden = false;
  if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/overview';
  else route();
}

// Hash routes: #/<page> or #/topics/<name>.
function route() {
  if (!getToken()) { showSignIn(); return; }
  const path = location.hash.replace(/^#\/?/, '');
  const slash = path.indexOf('/');
  const page = slash < 0 ? path : path.slice(0, slash);
  const rest = slash < 0 ? '' : path.slice(slash + 1);
  let view;
  if (page === 'topics' && rest) view = topicPage(safeDecode(rest));
  else if (PAGES[page]) view = PAGES[page]();
  else { location.hash = '#/overview'; return; }
  for (const a of document.querySelectorAll('.nav a')) {
    const active = a.dataset.page === page;
    a.classList.toggle('active', active);
    if (active) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  }
  startView(view);
}

function safeDecode(v) {
  try { return decodeURIComponent(v); } catch { return v; }
}

// Mounts a page view ({ title, root, load(), render(data) }) and polls it.
function startView(view) {
  stopPolling();
  shell.gen++;
  shell.view = view;
  shell.lastJson = null;
  shell.updatedAt = 0;
  shell.failed = false;
  shell.busy = false;
  hideError();
  $('#page-title').textContent = view.title;
  document.title = `${view.title} · eventmesh`;
  fill($('#page'), view.root);
  tickUpdated();
  poll(shell.gen);
}

function stopPolling() {
  shell.gen++;
  clearTimeout(shell.timer);
  shell.timer = null;
}

// One round: load the page's data, render it (unless unchanged), schedule
// the next round. A round asked for while one runs follows it at once.
async function poll(gen) {
  if (gen !== shell.gen) return;
  if (shell.busy) { shell.again = true; return; }
  clearTimeout(shell.timer);
  shell.busy = true;
  shell.again = false;
  const view = shell.view;
  try {
    const data = await view.load();
    if (gen !== shell.gen) return;
    hideError();
    shell.updatedAt = Date.now();
    shell.failed = false;
    let json = null;
    try { json = JSON.stringify(data); } catch { json = null; }
    if (json === null || json !== shell.lastJson) {
      shell.lastJson = json;
      view.render(data);
    }
  } catch (e) {
    if (gen !== shell.gen) return;
    showError(e);
    shell.failed = true;
    // Placeholders still loading say that the data is not there.
    for (const el of view.root.querySelectorAll('.loading')) el.replaceWith(emptyState('Could not load this data (see the error above).'));
  } finally {
    if (gen === shell.gen) shell.busy = false;
  }
  if (gen !== shell.gen) return;
  tickUpdated();
  shell.timer = setTimeout(() => (document.hidden ? (shell.again = true) : poll(gen)), shell.again ? 0 : POLL_MS);
}

// Polls again now (after an action).
function refreshNow() {
  poll(shell.gen);
}

// Polls again now and renders even when the data did not change.
function rerender() {
  shell.lastJson = null;
  refreshNow();
}

function tickUpdated() {
  const el = $('#updated');
  if (!shell.updatedAt) {
    el.textContent = shell.failed ? 'not loaded' : 'loading…';
    el.classList.toggle('stale', shell.failed);
    return;
  }
  const secs = Math.max(0, Math.round((Date.now() - shell.updatedAt) / 1000));
  el.textContent = `updated ${secs}s ago`;
  el.classList.toggle('stale', secs * 1000 > POLL_MS * 3);
}

function showError(e) {
  const banner = $('#error');
  const what = e instanceof ApiError
    ? [h('strong', null, `${e.method} ${e.path}`), e.status ? ` failed: ${e.status} ${e.code}` : ' failed', ` — ${e.message}`]
    : [h('strong', null, 'Error'), ` — ${e.message || e}`];
  fill(banner, h('span', null, what), h('button', { type: 'button', class: 'banner-close', 'aria-label': 'Dismiss', onclick: hideError }, '×'));
  banner.hidden = false;
}

function hideError() {
  const banner = $('#error');
  banner.hidden = true;
  banner.replaceChildren();
}

// An in-page confirmation (resolves true or false).
function confirmBox(message, okLabel = 'Confirm') {
  const box = $('#confirm');
  $('#confirm-text').textContent = message;
  $('#confirm-ok').textContent = okLabel;
  box.hidden = false;
  $('#confirm-cancel').focus();
  return new Promise((resolve) => {
    const done = (answer) => {
      box.hidden = true;
      $('#confirm-ok').onclick = $('#confirm-cancel').onclick = box.onkeydown = null;
      resolve(answer);
    };
    $('#confirm-ok').onclick = () => done(true);
    $('#confirm-cancel').onclick = () => done(false);
    box.onkeydown = (ev) => { if (ev.key === 'Escape') done(false); };
  });
}

// A message under a page's header: tone ok, warn or bad.
function notice(el, tone, ...content) {
  el.className = `notice notice-${tone}`;
  fill(el, ...content);
  el.hidden = false;
}

// ---------------------------------------------------------------------------
// 6. Pages
// ---------------------------------------------------------------------------

// --- Overview --------------------------------------------------------------

// Samples of /metrics kept across visits: { t, published, dispatched, acks,
// denied, latency (buckets) }. Trimmed to the chart window.
const samples = [];

function takeSample(text, t) {
  const p = parseMetrics(text);
  const smp = {
    t,
    published: metricSum(p, 'eventmesh_events_published_total'),
    dispatched: metricSum(p, 'eventmesh_events_dispatched_total'),
    acks: metricSum(p, 'eventmesh_acks_total'),
    denied: metricSum(p, 'eventmesh_gate_denied_total'),
    latency: histogram(p, 'eventmesh_delivery_latency_seconds'),
    deadLetters: metricSum(p, 'eventmesh_dead_letters_total'),
    pending: metricSum(p, 'eventmesh_pending_deliveries'),
  };
  samples.push(smp);
  while (samples.length && samples[0].t < t - WINDOW_MS - 10000) samples.shift();
  return smp;
}

// Points [t, value] from consecutive samples; a gap (page not shown, a
// restart) gives null, which breaks the line.
function derived(fn) {
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1];
    const b = samples[i];
    const dt = (b.t - a.t) / 1000;
    out.push([b.t, dt > 0 && dt < 15 ? fn(a, b, dt) : null]);
  }
  return out;
}

function rateOf(key) {
  return (a, b, dt) => {
    // An absent counter (a family with no series yet) counts as 0.
    const d = (b[key] ?? 0) - (a[key] ?? 0);
    return d >= 0 ? d / dt : null;
  };
}

const latencyMs = (q) => (a, b) => {
  const v = quantileBetween(a.latency, b.latency, q);
  return v === null ? null : v * 1000;
};

const lastValue = (points) => {
  for (let i = points.length - 1; i >= 0; i--) if (isNum(points[i][1])) return points[i][1];
  return null;
};

function overviewPage() {
  const chartCard = (id, title, fields) => h('section', { class: 'card chart-card', id },
    h('div', { class: 'chart-head' }, h('h2', { class: 'card-title' }, title),
      h('div', { class: 'chart-values' }, fields.map(([field, lbl, unit]) => h('span', { class: 'chart-value' },
        lbl ? h('span', { class: 'muted' }, `${lbl} `) : null, h('span', { 'data-field': field }, '0'), h('span', { class: 'unit' }, ` ${unit}`))))),
    h('div', { class: 'chart-body' }, loading()));
  const root = h('div', { class: 'overview stack' },
    h('div', { class: 'grid grid-3' },
      card('Health', h('div', { id: 'health-body' }, loading())),
      card('Readiness', h('div', { id: 'ready-body' }, loading())),
      card('Instances', h('div', { id: 'instances-body' }, loading()))),
    h('div', { class: 'stats card' },
      stat('Backlog (consumer lag)', 'backlog', 'events'),
      stat('Dead letters (since start)', 'dead-letters', 'events'),
      stat('Pending deliveries', 'pending', 'events'),
      stat('Topics', 'topic-count', null)),
    h('div', { class: 'grid grid-2' },
      chartCard('chart-publish', 'Publish rate', [['publish-rate', '', 'events/s']]),
      chartCard('chart-delivery', 'Delivery rate', [['dispatch-rate', 'dispatched', 'events/s'], ['ack-rate', 'acked', 'events/s']]),
      chartCard('chart-latency', 'End-to-end latency', [['latency-p50', 'p50', 'ms'], ['latency-p99', 'p99', 'ms']]),
      chartCard('chart-denials', 'Gate denials', [['denial-rate', '', 'denials/s']])));

  const renderHealth = (res) => {
    const d = res.data || {};
    return fill($('#health-body', root), h('div', { class: 'big-state' }, badge(d.status || `HTTP ${res.status}`)),
      h('dl', { class: 'kv' },
        d.version ? [h('dt', null, 'Version'), h('dd', null, d.version)] : null,
        d.storage ? [h('dt', null, 'Storage'), h('dd', null, d.storage, ' ', d.storageStatus ? badge(d.storageStatus) : null)] : null,
        d.storageError ? [h('dt', null, 'Storage error'), h('dd', { class: 'text-bad' }, d.storageError)] : null,
        d.topology ? [h('dt', null, 'Topology'), h('dd', null, d.topology)] : null,
        isNum(d.uptimeSeconds) ? [h('dt', null, 'Uptime'), h('dd', null, fmtDuration(d.uptimeSeconds * 1000))] : null));
  };
  const renderReady = (res) => {
    const d = res.data || {};
    const checks = Array.isArray(d.checks) ? d.checks : [];
    return fill($('#ready-body', root), h('div', { class: 'big-state' }, badge(d.status || (res.ok ? 'READY' : 'NOT_READY'))),
      h('ul', { class: 'checks' }, checks.map((c) => h('li', null,
        h('span', { class: `check-mark ${c.ok ? 'text-ok' : 'text-bad'}`, 'aria-label': c.ok ? 'ok' : 'failing' }, c.ok ? '✓' : '✗'),
        h('span', { class: 'check-name' }, c.name), c.detail ? h('span', { class: 'muted' }, ` — ${c.detail}`) : null))));
  };
  const renderInstances = (res, peers) => {
    const el = $('#instances-body', root);
    if (res.status === 404) {
      return fill(el, h('div', { class: 'big-state' }, badge('single node', 'info')),
        h('p', { class: 'muted' }, 'Partition ownership is off: this instance dispatches every partition.'));
    }
    const d = res.data || {};
    const list = Array.isArray(d.instances) ? d.instances : [];
    // Readiness by instance id, from GET /admin/cluster/health.
    const readiness = new Map((peers && Array.isArray(peers.data) ? peers.data : []).map((p) => [p.id, p]));
    const readyBadge = (id) => {
      const p = readiness.get(id);
      if (!p) return null;
      const kind = p.status === 'READY' ? 'ok' : p.status === 'UNREACHABLE' ? 'bad' : 'warn';
      return [' ', h('span', { 'data-field': 'instance-ready', title: p.detail || '' }, badge(p.status, kind))];
    };
    return fill(el, h('div', { class: 'big-state' }, h('span', { class: 'big-number' }, String(list.length)), ` instance${list.length === 1 ? '' : 's'}`,
      d.handovers > 0 ? [' ', badge(`${d.handovers} handover${d.handovers === 1 ? '' : 's'}`, 'warn')] : null),
      h('ul', { class: 'instances' }, list.map((i) => h('li', null,
        h('div', null, h('code', null, i.id), i.id === d.instance ? [' ', badge('this', 'info')] : null, readyBadge(i.id)),
        h('div', { class: 'muted small' }, `${i.address || ''} · ${plural(i.ownedPartitions, 'partition')}`)))));
  };
  const renderCharts = () => {
    const now = Date.now();
    const pub = derived(rateOf('published'));
    const disp = derived(rateOf('dispatched'));
    const acks = derived(rateOf('acks'));
    const p50 = derived(latencyMs(0.5));
    const p99 = derived(latencyMs(0.99));
    const den = derived(rateOf('denied'));
    const body = (id) => $(`#${id} .chart-body`, root);
    lineChart(body('chart-publish'), [{ label: 'published', points: pub }], 'events/s', now);
    lineChart(body('chart-delivery'), [{ label: 'dispatched', points: disp }, { label: 'acked', points: acks }], 'events/s', now);
    lineChart(body('chart-latency'), [{ label: 'p50', points: p50 }, { label: 'p99', points: p99 }], 'ms', now);
    lineChart(body('chart-denials'), [{ label: 'denials', points: den }], 'denials/s', now);
    setField(root, 'publish-rate', fmtRate(lastValue(pub) ?? 0));
    setField(root, 'dispatch-rate', fmtRate(lastValue(disp) ?? 0));
    setField(root, 'ack-rate', fmtRate(lastValue(acks) ?? 0));
    setField(root, 'latency-p50', fmtRate(lastValue(p50)));
    setField(root, 'latency-p99', fmtRate(lastValue(p99)));
    setField(root, 'denial-rate', fmtRate(lastValue(den) ?? 0));
  };

  // Charts follow the card width.
  let resizeTimer = null;
  const onResize = () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => (root.isConnected ? renderCharts() : window.removeEventListener('resize', onResize)), 150);
  };
  window.addEventListener('resize', onResize);

  return {
    title: 'Overview',
    root,
    async load() {
      const [health, ready, cluster, metrics, topics] = await Promise.all([
        api('/admin/health', { auth: false, allow: [503] }),
        api('/admin/ready', { auth: false, allow: [503] }),
        api('/admin/cluster', { allow: [404] }),
        api('/metrics', { text: true }),
        topicsWithDetails(),
      ]);
      // Each instance's readiness, asked by the server (one origin here).
      const peers = cluster.status === 404 ? null : await api('/admin/cluster/health', { allow: [404] });
      const sample = takeSample(metrics.data, Date.now());
      return { health, ready, cluster, peers, sample, backlog: topics.reduce((a, t) => a + topicLag(t.detail), 0), topicCount: topics.length };
    },
    render(d) {
      renderHealth(d.health);
      renderReady(d.ready);
      renderInstances(d.cluster, d.peers);
      setField(root, 'backlog', fmtInt(d.backlog));
      setField(root, 'dead-letters', fmtInt(d.sample.deadLetters ?? 0));
      setField(root, 'pending', fmtInt(d.sample.pending ?? 0));
      setField(root, 'topic-count', fmtInt(d.topicCount));
      renderCharts();
    },
  };
}

// --- Topics ----------------------------------------------------------------

// Deletes a topic after a confirmation; offers a forced delete when it is
// still subscribed. Resolves true when deleted.
async function deleteTopic(name, noticeEl) {
  if (!(await confirmBox(`Delete topic "${name}" and every event it holds? Its dead letters stay.`, 'Delete topic'))) return false;
  const res = await api(`/admin/topics/${enc(name)}`, { method: 'DELETE', allow: [409] });
  if (res.status === 409) {
    const msg = (res.data && res.data.message) || 'The topic is in use.';
    const force = await confirmBox(`${msg}\n\nDelete anyway? Its subscriptions are removed first.`, 'Delete anyway');
    if (!force) { notice(noticeEl, 'warn', `Topic "${name}" was not deleted: ${msg}`); return false; }
    await api(`/admin/topics/${enc(name)}?force=true`, { method: 'DELETE' });
  }
  notice(noticeEl, 'ok', `Topic "${name}" deleted.`);
  return true;
}

// Runs an action; an API error goes to the notice element.
async function act(noticeEl, fn) {
  try { return await fn(); } catch (e) {
    if (e.code !== 'unauthorized') notice(noticeEl, 'bad', e.message);
    return undefined;
  }
}

const RET_TIME = { s: 1000, min: 60000, h: 3600000, d: 86400000 };
const RET_SIZE = { KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3 };

function createTopicForm(noticeEl) {
  const select = (name, units, chosen) => h('select', { name, 'aria-label': 'unit' },
    Object.keys(units).map((u) => h('option', { value: u, selected: u === chosen }, u)));
  const number = (name, attrs) => h('input', { name, type: 'number', min: 0, step: 'any', placeholder: 'default', ...attrs });
  const form = h('form', { class: 'inline-form card', id: 'create-topic-form', hidden: true, novalidate: true },
    h('h2', { class: 'card-title' }, 'New topic'),
    h('div', { class: 'form-row' },
      h('label', null, 'Name', h('input', { name: 'topicName', id: 'new-topic-name', required: true, placeholder: 'orders.created' })),
      h('label', null, 'Partitions', number('partitions', { id: 'new-topic-partitions', min: 1, step: 1 })),
      h('label', null, 'Retention time', h('span', { class: 'with-unit' }, number('retentionTime'), select('timeUnit', RET_TIME, 'd'))),
      h('label', null, 'Retention size', h('span', { class: 'with-unit' }, number('retentionSize'), select('sizeUnit', RET_SIZE, 'GiB')))),
    h('p', { class: 'hint muted' }, 'Leave a field empty for the configured default; 0 means no limit.'),
    h('div', { class: 'form-actions' },
      h('button', { type: 'submit', class: 'btn btn-primary', id: 'create-topic-submit' }, 'Create topic'),
      button('Cancel', '', () => { form.hidden = true; })),
    h('p', { class: 'form-error', id: 'create-topic-error', hidden: true }));

  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = form.elements;
    const err = $('#create-topic-error', form);
    const name = f.topicName.value.trim();
    if (!name) { err.textContent = 'A topic needs a name.'; err.hidden = false; return; }
    const body = { name };
    if (f.partitions.value !== '') body.partitions = Number(f.partitions.value);
    const retention = {};
    if (f.retentionTime.value !== '') retention.ms = Math.round(Number(f.retentionTime.value) * RET_TIME[f.timeUnit.value]);
    if (f.retentionSize.value !== '') retention.bytes = Math.round(Number(f.retentionSize.value) * RET_SIZE[f.sizeUnit.value]);
    if (Object.keys(retention).length) body.retention = retention;
    err.hidden = true;
    try {
      const res = await api('/admin/topics', { method: 'POST', body, allow: [400, 409] });
      if (res.status === 409) throw new Error(`A topic named "${name}" already exists.`);
      if (res.status === 400) throw new Error((res.data && res.data.message) || 'The server refused the topic.');
      form.reset();
      form.hidden = true;
      notice(noticeEl, 'ok', 'Topic ', h('a', { href: `#/topics/${enc(name)}` }, name), ' created.');
      refreshNow();
    } catch (e) {
      if (e.code === 'unauthorized') return;
      err.textContent = e.message;
      err.hidden = false;
    }
  });
  return form;
}

function topicsPage() {
  const noticeEl = h('div', { id: 'topics-notice', hidden: true });
  const form = createTopicForm(noticeEl);
  const list = h('div', { id: 'topics-list', class: 'stack' }, loading());
  const root = h('div', { class: 'stack' },
    h('div', { class: 'toolbar' }, h('span', { class: 'muted', id: 'topics-count' }),
      button('New topic', 'btn-primary', () => { form.hidden = false; $('#new-topic-name', form).focus(); }, { id: 'new-topic' })),
    noticeEl, form, list);

  const columns = [
    { key: 'name', label: 'Topic', render: (t) => h('a', { href: `#/topics/${enc(t.name)}`, class: 'strong' }, t.name) },
    { key: 'partitions', num: true },
    { key: 'events', label: 'End offsets (sum)', num: true, render: (t) => fmtInt((t.endOffsets || []).reduce((a, b) => a + b, 0)) },
    { key: 'consumers', num: true, render: (t) => (t.detail ? fmtInt(t.detail.consumers.length) : '—') },
    { key: 'lag', label: 'Lag', num: true, field: 'lag', render: (t) => fmtInt(topicLag(t.detail)) },
    { key: 'bytes', label: 'Stored', num: true, render: (t) => (t.detail ? fmtBytes(t.detail.bytes) : '—') },
    { key: 'retention', render: (t) => (t.detail ? retentionText(t.detail.retention) : '—') },
    { key: 'actions', label: '', render: (t) => button('Delete', 'btn-small btn-danger-ghost', () => act(noticeEl, async () => {
      if (await deleteTopic(t.name, noticeEl)) refreshNow();
    }), { 'data-action': 'delete-topic' }) },
  ];

  return {
    title: 'Topics',
    root,
    load: topicsWithDetails,
    render(topics) {
      $('#topics-count', root).textContent = `${topics.length} topic${topics.length === 1 ? '' : 's'}`;
      if (topics.length === 0) return fill(list, emptyState('No topics yet. Topics are created by the first publish, or with "New topic".', 'topics-empty'));
      return fill(list, table(columns, topics, { id: 'topics-table', rowAttrs: (t) => ({ 'data-topic': t.name }) }));
    },
  };
}

function retentionText(r) {
  if (!r) return '—';
  const parts = [];
  if (r.ms) parts.push(fmtDuration(r.ms));
  if (r.bytes) parts.push(`${fmtBytes(r.bytes)} per partition`);
  const own = r.source === 'topic';
  return h('span', null, parts.length ? parts.join(' · ') : 'none', ' ', r.source ? badge(own ? 'own' : r.source, own ? 'info' : 'muted') : null);
}

// --- One topic --------------------------------------------------------------

// How a reset target reads in a sentence.
function targetText(to) {
  if (to === 'earliest') return 'the oldest event it holds';
  if (to === 'latest') return 'the end (only new events)';
  if (typeof to === 'number') return `offset ${fmtInt(to)}`;
  return `the first event appended at or after ${to}`;
}

// Moves a group's offsets on a topic after a confirmation that says how
// many events come again (from a dry run), and how many deliveries its
// members hold (released by the reset). Resolves true when reset.
async function resetGroup(group, topic, to, noticeEl) {
  const path = `/admin/groups/${enc(group)}/offsets`;
  const body = { topic, to };
  const plan = (await api(`${path}?dryRun=true`, { method: 'POST', body })).data;
  const n = (v) => `${fmtInt(v)} event${v === 1 ? '' : 's'}`;
  let text = `Reset group "${group}" on "${topic}" to ${targetText(to)}? ${n(plan.again)} will come again`;
  text += plan.skipped ? `, ${n(plan.skipped)} will be passed over.` : '.';
  if (plan.held) text += `\n\nIts members hold ${fmtInt(plan.held)} deliveries now: they are released and come again from the new position.`;
  if (!(await confirmBox(text, plan.held ? 'Release and reset' : 'Reset group'))) return false;
  const res = await api(`${path}${plan.held ? '?force=true' : ''}`, { method: 'POST', body, allow: [409] });
  if (res.status === 409) { notice(noticeEl, 'warn', `Group "${group}" was not reset: ${res.data.message}`); return false; }
  notice(noticeEl, 'ok', `Group "${group}" reset: ${n(res.data.again)} come again.`);
  return true;
}

// The form that picks where a group goes: the oldest event, the end, a
// time or an offset.
function replayForm(topic, noticeEl) {
  const form = h('form', { class: 'inline-form card', id: 'replay-form', hidden: true, novalidate: true },
    h('h2', { class: 'card-title' }, 'Replay group ', h('span', { id: 'replay-group' })),
    h('div', { class: 'form-row' },
      h('label', null, 'From', h('select', { name: 'target', id: 'replay-target' },
        h('option', { value: 'earliest' }, 'the oldest event held'),
        h('option', { value: 'time' }, 'a time'),
        h('option', { value: 'offset' }, 'an offset (every partition)'),
        h('option', { value: 'latest' }, 'the end (skip everything unread)'))),
      h('label', null, 'Time', h('input', { name: 'time', id: 'replay-time', type: 'datetime-local', step: 1 })),
      h('label', null, 'Offset', h('input', { name: 'offset', id: 'replay-offset', type: 'number', min: 0, step: 1 }))),
    h('div', { class: 'form-actions' },
      h('button', { type: 'submit', class: 'btn btn-primary', id: 'replay-submit' }, 'Reset…'),
      button('Cancel', '', () => { form.hidden = true; })),
    h('p', { class: 'form-error', id: 'replay-error', hidden: true }));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const f = form.elements;
    const err = $('#replay-error', form);
    let to = f.target.value;
    if (to === 'time') {
      const t = new Date(f.time.value);
      if (!f.time.value || Number.isNaN(t.getTime())) { err.textContent = 'Pick a time.'; err.hidden = false; return; }
      to = t.toISOString();
    } else if (to === 'offset') {
      if (f.offset.value === '') { err.textContent = 'Give an offset.'; err.hidden = false; return; }
      to = Number(f.offset.value);
    }
    err.hidden = true;
    try {
      if (await resetGroup(form.dataset.group, topic, to, noticeEl)) { form.hidden = true; refreshNow(); }
    } catch (e) {
      if (e.code === 'unauthorized') return;
      err.textContent = e.message;
      err.hidden = false;
    }
  });
  return form;
}

function topicPage(name) {
  const noticeEl = h('div', { hidden: true, id: 'topic-notice' });
  const body = h('div', { id: 'topic-body', class: 'stack' }, loading());
  const replay = replayForm(name, noticeEl);
  const openReplay = (group) => {
    replay.dataset.group = group;
    $('#replay-group', replay).textContent = `"${group}"`;
    replay.hidden = false;
    $('#replay-target', replay).focus();
  };
  const root = h('div', { class: 'stack' },
    h('div', { class: 'toolbar' },
      h('a', { href: '#/topics', class: 'back' }, '← All topics'),
      button('Delete topic', 'btn-danger-ghost', () => act(noticeEl, async () => {
        if (await deleteTopic(name, noticeEl)) location.hash = '#/topics';
      }), { id: 'delete-topic' })),
    noticeEl, replay, body);

  return {
    title: `Topic ${name}`,
    root,
    load: () => api(`/admin/topics/${enc(name)}`, { allow: [404] }),
    render(res) {
      if (res.status === 404) return fill(body, emptyState(`Topic "${name}" does not exist.`, 'topic-missing'));
      const t = res.data;
      const consumers = t.consumers || [];
      const offsets = t.offsets || [];
      const hasBytes = offsets.some((o) => isNum(o.bytes));
      fill(body,
        h('div', { class: 'stats card' },
          stat('Partitions', 'partitions', null, fmtInt(t.partitions)),
          stat('Stored', 'bytes', null, fmtBytes(t.bytes)),
          stat('Subscriptions', 'subscriptions', null, fmtInt(t.subscriptions)),
          stat('Total lag', 'lag', 'events', fmtInt(consumers.reduce((a, c) => a + (c.lag || 0), 0)))),
        card('Retention', h('p', { id: 'topic-retention' }, 'Age limit: ', h('strong', null, fmtDuration(t.retention?.ms, 'none')), ' · Size limit: ',
          h('strong', null, fmtBytes(t.retention?.bytes, 'none')), t.retention?.bytes ? ' per partition' : '', ' · ',
          t.retention?.source === 'topic' ? 'set on this topic' : 'the configured default')),
        card('Partitions', table([
          { key: 'partition', num: true },
          { key: 'startOffset', label: 'Start offset', num: true },
          { key: 'endOffset', label: 'End offset', num: true },
          { key: 'stored', label: 'Events held', num: true, render: (o) => fmtInt(o.endOffset - o.startOffset) },
          hasBytes ? { key: 'bytes', label: 'Bytes', num: true, render: (o) => fmtBytes(o.bytes) } : null,
        ].filter(Boolean), offsets, { id: 'partitions-table', rowAttrs: (o) => ({ 'data-partition': o.partition }) })),
        card('Consumer groups', consumers.length === 0 ? emptyState('No consumers read this topic.') : consumersTable(consumers, openReplay)));
    },
  };
}

// Per consumer: a summary row with its total lag (and a way to replay its
// group), then one row per partition.
function consumersTable(consumers, onReplay) {
  const num = (v) => h('td', { class: 'num' }, fmtInt(v));
  // A broadcast member's consumer is "<group>:<client>"; a reset is per group.
  const groupOf = (consumer) => consumer.split(':')[0];
  const rows = consumers.flatMap((c) => [
    h('tr', { class: 'group-row', 'data-consumer': c.consumer }, h('td', null, h('strong', null, c.consumer)), h('td', { class: 'muted' }, 'all'), h('td', null),
      h('td', { class: 'num', 'data-field': 'lag' }, h('strong', null, fmtInt(c.lag))),
      h('td', null, button('Replay…', 'btn-small', () => onReplay(groupOf(c.consumer)), { 'data-action': 'replay-group' }))),
    ...(c.partitions || []).map((p) => h('tr', { class: 'sub-row' }, h('td', null), num(p.partition), num(p.committed),
      h('td', { class: `num ${p.lag > 0 ? 'text-warn' : ''}` }, fmtInt(p.lag)), h('td', null))),
  ]);
  return h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'consumers-table' },
    h('thead', null, h('tr', null, h('th', null, 'Consumer'), ['Partition', 'Committed', 'Lag'].map((t) => h('th', { class: 'num' }, t)), h('th', null))),
    h('tbody', null, rows)));
}

// --- Subscriptions and clients ----------------------------------------------

function subscriptionsPage() {
  const subsEl = h('div', null, loading());
  const clientsEl = h('div', null, loading());
  const root = h('div', { class: 'stack' }, card('Subscriptions', subsEl), card('Clients', clientsEl));
  const subOverrides = {
    mode: { key: 'mode', render: (r) => (r.mode ? badge(String(r.mode).toLowerCase()) : '—') },
    url: { key: 'url', render: (r) => (r.url ? h('code', null, r.url) : h('span', { class: 'muted' }, 'poll')) },
    // Every filter must match: shown one per line, in their JSON form.
    filters: { key: 'filters', field: 'filters', render: (r) => ((r.filters || []).length === 0 ? h('span', { class: 'muted' }, 'all events')
      : h('div', { class: 'filters' }, r.filters.map((f) => h('div', null, h('code', null, JSON.stringify(f)))))) },
    // A pattern subscription: the topics it follows, each a link.
    attachedTopics: { key: 'attachedTopics', field: 'attachedTopics', label: 'Topics followed', render: (r) => (r.attachedTopics === undefined ? h('span', { class: 'muted' }, '—')
      : r.attachedTopics.length === 0 ? h('span', { class: 'muted' }, 'none yet')
        : h('div', null, r.attachedTopics.map((t) => h('div', null, h('a', { href: `#/topics/${enc(t)}` }, t))))) },
  };
  const CLIENT_KNOWN = ['clientId', 'inflight', 'queued', 'state', 'idleSinceMs', 'subscriptions'];
  const SUB_KNOWN = ['topic', 'group', 'mode', 'transport', 'url'];

  // A client's subscriptions: one line each, extra fields shown as key=value.
  const clientSubs = (subs) => h('ul', { class: 'sub-list' }, (subs || []).map((sub) => h('li', null,
    h('a', { href: `#/topics/${enc(sub.topic)}` }, sub.topic), h('span', { class: 'muted' }, ' · '), sub.group,
    ' ', sub.mode ? badge(String(sub.mode).toLowerCase()) : null, ' ', sub.transport ? badge(sub.transport) : null,
    sub.url ? [' ', h('code', null, sub.url)] : null,
    Object.keys(sub).filter((k) => !SUB_KNOWN.includes(k)).map((k) => [' ', h('span', { class: 'muted' }, `${label(k)}: `), valueNode(sub[k], k)]))));

  // An MQTT client's session: its protocol, whether it is connected, and
  // whether it outlives its connection.
  const mqttSession = (s) => (s ? [badge(`MQTT ${s.protocol === 5 ? '5.0' : '3.1.1'}`), ' ',
    badge(s.connected ? 'connected' : 'disconnected', s.connected ? 'ok' : 'warn'),
    s.persistent ? [' ', badge('persistent')] : null] : '—');

  return {
    title: 'Subscriptions and clients',
    root,
    async load() {
      const [subs, clients] = await Promise.all([api('/admin/subscriptions'), api('/admin/clients')]);
      return { subs: subs.data || [], clients: clients.data || [] };
    },
    render({ subs, clients }) {
      fill(subsEl, subs.length === 0 ? emptyState('No subscriptions.', 'subscriptions-empty')
        : table(genericColumns(subs, ['clientId', 'topic', 'attachedTopics', 'group', 'mode', 'url', 'filters', 'tenant', 'principal', 'from', 'createdMs', 'subscriptionId'], subOverrides),
          subs, { id: 'subscriptions-table', rowAttrs: (r) => ({ 'data-subscription': r.subscriptionId || `${r.group}/${r.topic}/${r.clientId}` }) }));
      if (clients.length === 0) return fill(clientsEl, emptyState('No clients are subscribed.', 'clients-empty'));
      const cols = genericColumns(clients, CLIENT_KNOWN, {
        clientId: { key: 'clientId', render: (c) => h('strong', null, c.clientId) },
        subscriptions: { key: 'subscriptions', render: (c) => clientSubs(c.subscriptions) },
        state: { key: 'state', render: (c) => (c.state ? badge(c.state, c.state === 'idle' ? 'warn' : 'ok') : '—') },
        mqtt: { key: 'mqtt', render: (c) => mqttSession(c.mqtt) },
      });
      return fill(clientsEl, table(cols, clients, { id: 'clients-table', rowAttrs: (c) => ({ 'data-client': c.clientId }) }));
    },
  };
}

// --- Dead letters -------------------------------------------------------------

// Kept across visits: the chosen topic.
const dlqState = { topic: '' };

// Pretty-prints the event JSON a dead letter holds (as is when not JSON).
function prettyEvent(eventJson) {
  try {
    const event = JSON.parse(eventJson);
    return { text: JSON.stringify(event, null, 2), event };
  } catch {
    return { text: String(eventJson ?? ''), event: null };
  }
}

function deadLettersPage() {
  const selected = new Set();
  const opened = new Set();
  let rows = [];
  const topicSelect = h('select', { id: 'dlq-topic', 'aria-label': 'Topic' });
  const outcome = h('div', { id: 'dlq-outcome', class: 'notice', hidden: true, 'aria-live': 'polite' });
  const listEl = h('div', { id: 'dlq-list', class: 'stack' }, loading());
  const btn = (id, text, cls, onclick) => h('button', { type: 'button', id, class: `btn ${cls}`, onclick }, text);
  const replaySel = btn('replay-selected', 'Replay selected', 'btn-primary', () => replay([...selected]));
  const replayAll = btn('replay-all', 'Replay all', '', () => replay(null));
  const deleteSel = btn('delete-selected', 'Delete selected', 'btn-danger-ghost', () => removeSelected());
  const selCount = h('span', { class: 'muted', id: 'dlq-selected-count' });
  // A topic no longer listed (deleted topics keep their dead letters).
  const otherTopic = h('input', { type: 'text', id: 'dlq-topic-other', placeholder: 'or another topic…', 'aria-label': 'Another topic', spellcheck: 'false' });
  const root = h('div', { class: 'stack' },
    h('div', { class: 'toolbar' }, h('label', { class: 'inline-label' }, 'Topic ', topicSelect), otherTopic,
      h('div', { class: 'toolbar toolbar-end' }, selCount, replaySel, replayAll, deleteSel)),
    outcome, listEl);

  const chooseTopic = (topic) => {
    if (!topic || topic === dlqState.topic) return;
    dlqState.topic = topic;
    selected.clear();
    opened.clear();
    fill(listEl, loading());
    outcome.hidden = true;
    refreshNow();
  };
  topicSelect.addEventListener('change', () => chooseTopic(topicSelect.value));
  otherTopic.addEventListener('change', () => { chooseTopic(otherTopic.value.trim()); otherTopic.value = ''; });

  const updateButtons = () => {
    const n = selected.size;
    replaySel.disabled = n === 0;
    deleteSel.disabled = n === 0;
    replayAll.disabled = rows.length === 0;
    selCount.textContent = n ? `${n} selected` : '';
    const all = $('#dlq-select-all', listEl);
    if (all) { all.checked = n > 0 && n === rows.length; all.indeterminate = n > 0 && n < rows.length; }
  };

  // POST /admin/dlq/replay with the chosen ids, or every dead letter.
  async function replay(ids) {
    const topic = dlqState.topic;
    if (!topic) return;
    if (ids === null && !(await confirmBox(`Replay every dead letter of "${topic}" (up to 1000)? They are published again as new events.`, 'Replay all'))) return;
    if (ids !== null && ids.length === 0) return;
    const q = new URLSearchParams({ topic });
    if (ids === null) q.set('max', '1000'); else for (const id of ids) q.append('id', id);
    await act(outcome, async () => {
      const { data } = await api(`/admin/dlq/replay?${q}`, { method: 'POST' });
      const replayed = data?.replayed ?? 0;
      const failed = data?.failed ?? 0;
      notice(outcome, failed ? 'warn' : 'ok', `Replayed ${replayed} dead letter${replayed === 1 ? '' : 's'}`, failed ? `; ${failed} could not be replayed.` : '.');
      outcome.dataset.replayed = replayed;
      outcome.dataset.failed = failed;
      selected.clear();
      rerender();
    });
  }

  // DELETE /admin/dlq/{topic}/{id}, one request per chosen id.
  async function removeSelected() {
    const topic = dlqState.topic;
    const ids = [...selected];
    if (!ids.length || !(await confirmBox(`Delete ${ids.length} dead letter${ids.length === 1 ? '' : 's'} of "${topic}" for good?`, 'Delete'))) return;
    const results = await Promise.allSettled(ids.map((id) => api(`/admin/dlq/${enc(topic)}/${enc(id)}`, { method: 'DELETE' })));
    const failures = results.filter((r) => r.status === 'rejected');
    const deleted = ids.length - failures.length;
    if (failures.some((f) => f.reason?.code === 'unauthorized')) return;
    notice(outcome, failures.length ? 'bad' : 'ok', `Deleted ${deleted} dead letter${deleted === 1 ? '' : 's'}`,
      failures.length ? `; ${failures.length} failed: ${failures[0].reason?.message}` : '.');
    outcome.dataset.deleted = deleted;
    outcome.dataset.failed = failures.length;
    selected.clear();
    rerender();
  }

  // A dead letter's row, and below it a full-width row with its event
  // (shown while opened).
  const row = (d) => {
    const { text, event } = prettyEvent(d.eventJson);
    const summary = event && typeof event === 'object' ? [event.type, event.source, event.id].filter(Boolean).join(' · ') : 'event';
    const isOpen = opened.has(d.id);
    const body = h('tr', { class: 'detail-row', 'data-dlq-event': d.id, hidden: !isOpen }, h('td', { colspan: 8 }, h('pre', { class: 'json-block' }, text)));
    const toggle = h('button', { type: 'button', class: 'link-btn', 'data-action': 'toggle-event', 'aria-expanded': String(isOpen) },
      isOpen ? '▾ ' : '▸ ', summary || 'event');
    toggle.addEventListener('click', () => {
      const open = !opened.has(d.id);
      if (open) opened.add(d.id); else opened.delete(d.id);
      body.hidden = !open;
      toggle.setAttribute('aria-expanded', String(open));
      toggle.firstChild.textContent = open ? '▾ ' : '▸ ';
    });
    const check = h('input', { type: 'checkbox', class: 'dlq-check', 'aria-label': `Select ${d.id}`, checked: selected.has(d.id), 'data-id': d.id });
    check.addEventListener('change', () => { if (check.checked) selected.add(d.id); else selected.delete(d.id); updateButtons(); });
    // The id (consumer:partition:offset) is in the row's tooltip.
    return [h('tr', { 'data-dlq-id': d.id, title: `id ${d.id}` },
      h('td', { class: 'check-col' }, check),
      h('td', null, d.consumer),
      h('td', { class: 'num' }, fmtInt(d.partition)),
      h('td', { class: 'num' }, fmtInt(d.offset)),
      h('td', { class: 'num' }, fmtInt(d.attempts)),
      h('td', { class: 'error-text' }, d.lastError || '—'),
      h('td', null, timeCell(d.deadAtMs)),
      h('td', { class: 'event-col' }, toggle)), body];
  };

  return {
    title: 'Dead letters',
    root,
    async load() {
      const topics = (await api('/admin/topics')).data || [];
      if (!dlqState.topic && topics.length) dlqState.topic = topics[0].name;
      const topic = dlqState.topic;
      const letters = topic ? (await api(`/admin/dlq/browse?${new URLSearchParams({ topic, max: '100' })}`)).data || [] : [];
      return { topics: topics.map((t) => t.name), topic, letters };
    },
    render(d) {
      if (d.topic !== dlqState.topic) return; // the topic changed meanwhile
      const names = d.topic && !d.topics.includes(d.topic) ? [d.topic, ...d.topics] : d.topics;
      fill(topicSelect, names.map((n) => h('option', { value: n, selected: n === d.topic }, n)));
      topicSelect.disabled = names.length === 0;
      rows = d.letters;
      const ids = new Set(rows.map((r) => r.id));
      for (const id of [...selected]) if (!ids.has(id)) selected.delete(id);
      if (!d.topic) fill(listEl, emptyState('No topics yet, so no dead letters.', 'dlq-empty'));
      else if (rows.length === 0) fill(listEl, emptyState(`No dead letters for "${d.topic}".`, 'dlq-empty'));
      else {
        const all = h('input', { type: 'checkbox', id: 'dlq-select-all', 'aria-label': 'Select all' });
        all.addEventListener('change', () => {
          for (const r of rows) if (all.checked) selected.add(r.id); else selected.delete(r.id);
          for (const c of listEl.querySelectorAll('.dlq-check')) c.checked = all.checked;
          updateButtons();
        });
        fill(listEl, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'dlq-table' },
          h('thead', null, h('tr', null, h('th', { class: 'check-col' }, all), h('th', null, 'Consumer'),
            ['Partition', 'Offset', 'Attempts'].map((t) => h('th', { class: 'num' }, t)), ['Last error', 'Dead since', 'Event'].map((t) => h('th', null, t)))),
          h('tbody', null, rows.map(row)))),
        rows.length >= 100 ? h('p', { class: 'muted hint' }, 'Showing the first 100.') : null);
      }
      updateButtons();
    },
  };
}

// --- Cluster ------------------------------------------------------------------

function clusterPage() {
  const body = h('div', { class: 'stack' }, loading());
  return {
    title: 'Cluster',
    root: body,
    load: () => api('/admin/cluster', { allow: [404] }),
    render(res) {
      if (res.status === 404) {
        return fill(body, h('div', { class: 'empty', id: 'single-node' }, h('strong', null, 'Single node. '),
          (res.data && res.data.message) || 'Partition ownership is off.'));
      }
      const c = res.data;
      const instances = c.instances || [];
      const parts = c.partitions || [];
      const moving = (p) => p.assignee && p.assignee !== p.owner;
      const instCols = genericColumns(instances, ['id', 'address', 'adminAddress', 'boot', 'sinceMs', 'leaseMs', 'ownedPartitions'], {
        id: { key: 'id', label: 'Instance', render: (i) => [h('code', null, i.id), i.id === c.instance ? [' ', badge('this', 'info')] : null] },
        leaseMs: { key: 'leaseMs', label: 'Lease', num: true, render: (i) => fmtDuration(i.leaseMs) },
        sinceMs: { key: 'sinceMs', label: 'Registered', render: (i) => timeCell(i.sinceMs) },
        boot: { key: 'boot', render: (i) => h('code', { class: 'id' }, i.boot) },
      });
      return fill(body,
        h('div', { class: 'stats card' },
          stat('This instance', 'instance', null, h('code', { class: 'small' }, c.instance)),
          stat('Lease', 'registered', null, badge(c.registered ? 'registered' : 'not registered')),
          stat('Instances', 'instances', null, fmtInt(instances.length)),
          stat('Handovers', 'handovers', null, h('span', { class: c.handovers > 0 ? 'text-warn' : null }, fmtInt(c.handovers)))),
        card('Instances', instances.length === 0 ? emptyState('No instances registered.')
          : table(instCols, instances, { id: 'instances-table', rowAttrs: (i) => ({ 'data-instance': i.id }) })),
        card('Partition owners', parts.length === 0 ? emptyState('No partitions are claimed (no subscribed topics).') : table([
          { key: 'topic', render: (p) => h('a', { href: `#/topics/${enc(p.topic)}` }, p.topic) },
          { key: 'partition', num: true },
          { key: 'owner', render: (p) => h('code', null, p.owner) },
          { key: 'token', label: 'Fencing token', num: true },
          { key: 'assignee', render: (p) => (moving(p) ? [badge('handover', 'warn'), ' → ', h('code', null, p.assignee)] : h('code', null, p.assignee || '—')) },
        ], parts, { id: 'partitions-table', rowAttrs: (p) => ({ 'data-partition': `${p.topic}/${p.partition}`, class: moving(p) ? 'row-warn' : null }) })));
    },
  };
}

// --- Connectors -----------------------------------------------------------------

function connectorsPage() {
  const noticeEl = h('div', { hidden: true });
  const body = h('div', { class: 'stack' }, loading());
  const expanded = new Set();
  const root = h('div', { class: 'stack' }, noticeEl, body);

  const setPaused = (name, paused) => act(noticeEl, async () => {
    await api(`/admin/connectors/${enc(name)}/${paused ? 'pause' : 'resume'}`, { method: 'POST' });
    notice(noticeEl, 'ok', `Connector "${name}" ${paused ? 'paused' : 'resumed'}.`);
    refreshNow();
  });

  const detailRow = (c) => h('tr', { class: 'detail-row' }, h('td', { colspan: 7 }, h('dl', { class: 'kv kv-wide' },
    Object.entries({ principal: c.principal, tenant: c.tenant, group: c.group, generation: c.generation, token: c.status?.token,
      position: c.status?.position, since: c.status?.sinceMs, created: c.createdMs, updated: c.updatedMs })
      .filter(([, v]) => v !== undefined && v !== null)
      .map(([k, v]) => [h('dt', null, label(k)), h('dd', null, ['since', 'created', 'updated'].includes(k) ? timeCell(v) : valueNode(v))]),
    h('dt', null, 'Config'), h('dd', null, h('pre', { class: 'json-block' }, JSON.stringify(c.config ?? {}, null, 2))))));

  const row = (c) => {
    const st = c.status || {};
    const state = st.state || (c.paused ? 'paused' : 'unknown');
    const open = expanded.has(c.name);
    const toggle = h('button', { type: 'button', class: 'btn-icon', 'aria-expanded': String(open), 'aria-label': 'Details',
      onclick: () => { if (expanded.has(c.name)) expanded.delete(c.name); else expanded.add(c.name); view.render(last); } }, open ? '▾' : '▸');
    return [h('tr', { 'data-connector': c.name },
      h('td', { class: 'nowrap' }, toggle, ' ', h('strong', null, c.name), h('div', { class: 'muted small indent' }, c.kind)),
      h('td', null, h('a', { href: `#/topics/${enc(c.topic)}` }, c.topic)),
      h('td', null, h('span', { class: `badge badge-${toneOf(state)}`, 'data-field': 'state' }, state),
        st.instance ? h('div', { class: 'muted small' }, 'on ', h('code', null, st.instance)) : null),
      h('td', { class: 'num' }, h('span', { 'data-field': 'events-per-second' }, fmtRate(st.eventsPerSecond ?? 0)),
        h('div', { class: 'muted small' }, h('span', { 'data-field': 'events' }, fmtInt(st.events ?? 0)), ' total')),
      h('td', { class: 'num', 'data-field': 'lag' }, isNum(st.lag) ? fmtInt(st.lag) : '—'),
      h('td', { class: 'error-text' }, st.lastError
        ? [st.lastError, st.lastErrorMs ? h('div', { class: 'muted small' }, fmtTime(st.lastErrorMs)) : null]
        : h('span', { class: 'muted' }, '—')),
      h('td', { class: 'actions' }, c.paused
        ? h('button', { type: 'button', class: 'btn btn-small', 'data-action': 'resume', onclick: () => setPaused(c.name, false) }, 'Resume')
        : h('button', { type: 'button', class: 'btn btn-small', 'data-action': 'pause', onclick: () => setPaused(c.name, true) }, 'Pause'))),
    open ? detailRow(c) : null];
  };

  let last = [];
  const view = {
    title: 'Connectors',
    root,
    load: async () => (await api('/admin/connectors')).data || [],
    render(list) {
      last = list;
      if (list.length === 0) return fill(body, emptyState('No connectors defined.', 'connectors-empty'));
      return fill(body, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'connectors-table' },
        h('thead', null, h('tr', null, ['Connector', 'Topic', 'State'].map((t) => h('th', null, t)),
          ['Events/s', 'Lag'].map((t) => h('th', { class: 'num' }, t)), h('th', null, 'Last error'), h('th', null, ''))),
        h('tbody', null, list.map(row)))));
    },
  };
  return view;
}

// --- Links ----------------------------------------------------------------------

// The mesh links to other clusters (/admin/links): where each runs and how
// it does, with pause and resume.
function linksPage() {
  const noticeEl = h('div', { hidden: true });
  const body = h('div', { class: 'stack' }, loading());
  const root = h('div', { class: 'stack' }, noticeEl, body);

  const setPaused = (name, paused) => act(noticeEl, async () => {
    await api(`/admin/links/${enc(name)}/${paused ? 'pause' : 'resume'}`, { method: 'POST' });
    notice(noticeEl, 'ok', `Link "${name}" ${paused ? 'paused' : 'resumed'}.`);
    refreshNow();
  });

  const exportsOf = (l) => (l.exports || []).map((x, i) => [i ? h('br') : null, h('code', null, x.topic),
    x.filters && x.filters.length ? h('span', { class: 'muted small' }, ` (${plural(x.filters.length, 'filter')})`) : null]);

  const row = (l) => {
    const st = l.status || {};
    const state = st.state || 'UNASSIGNED';
    return h('tr', { 'data-link': l.name },
      h('td', { class: 'nowrap' }, h('strong', null, l.name),
        l.renamePrefix ? h('div', { class: 'muted small' }, 'as ', h('code', null, `${l.renamePrefix}…`)) : null),
      h('td', null, h('span', { class: `badge badge-${toneOf(state)}`, 'data-field': 'state' }, state)),
      // The remote cluster's name once reached (its URL under it), else the URL.
      h('td', null, st.remoteCluster
        ? [h('span', { 'data-field': 'remote' }, st.remoteCluster), h('div', { class: 'muted small' }, h('code', null, l.remote?.url))]
        : h('code', { 'data-field': 'remote' }, l.remote?.url || '—')),
      h('td', { 'data-field': 'exports' }, exportsOf(l)),
      h('td', { class: 'num' }, h('span', { 'data-field': 'lag' }, fmtInt(st.lagEvents ?? 0)),
        h('div', { class: 'muted small', 'data-field': 'lag-seconds' }, fmtDuration(Math.round((st.lagSeconds ?? 0) * 1000), '0 s'))),
      h('td', { class: 'num' }, h('span', { 'data-field': 'events-per-second' }, fmtRate(st.eventsPerSecond ?? 0)),
        h('div', { class: 'muted small' }, h('span', { 'data-field': 'events' }, fmtInt(st.events ?? 0)), ' sent')),
      h('td', { 'data-field': 'instance' }, st.instance ? h('code', null, st.instance) : h('span', { class: 'muted' }, '—')),
      h('td', { class: 'error-text' }, st.lastError
        ? [st.lastError, st.lastErrorMs ? h('div', { class: 'muted small' }, fmtTime(st.lastErrorMs)) : null]
        : h('span', { class: 'muted' }, '—')),
      h('td', { class: 'actions' }, l.paused
        ? h('button', { type: 'button', class: 'btn btn-small', 'data-action': 'resume', onclick: () => setPaused(l.name, false) }, 'Resume')
        : h('button', { type: 'button', class: 'btn btn-small', 'data-action': 'pause', onclick: () => setPaused(l.name, true) }, 'Pause')));
  };

  return {
    title: 'Links',
    root,
    load: async () => (await api('/admin/links')).data || [],
    render(list) {
      if (list.length === 0) return fill(body, emptyState('No links to other clusters.', 'links-empty'));
      return fill(body, h('div', { class: 'table-wrap' }, h('table', { class: 'table', id: 'links-table' },
        h('thead', null, h('tr', null, ['Link', 'State', 'Remote', 'Exports'].map((t) => h('th', null, t)),
          ['Lag', 'Events/s'].map((t) => h('th', { class: 'num' }, t)),
          ['Instance', 'Last error', ''].map((t) => h('th', null, t)))),
        h('tbody', null, list.map(row)))));
    },
  };
}

// --- A2A tasks --------------------------------------------------------------------

function tasksPage() {
  const body = h('div', { class: 'stack' }, loading());
  return {
    title: 'A2A tasks',
    root: body,
    load: () => api('/admin/a2a/tasks?limit=100', { allow: [404] }),
    render(res) {
      if (res.status === 404) return fill(body, emptyState('The A2A gateway is off (eventmesh.a2a.enabled=false).', 'a2a-off'));
      const tasks = res.data?.tasks || [];
      const counts = Object.entries(res.data?.counts || {});
      const total = res.data?.total ?? counts.reduce((a, [, n]) => a + n, 0);
      return fill(body,
        h('div', { class: 'stats card', id: 'task-counts' },
          stat('All tasks', 'total', null, fmtInt(total)),
          counts.map(([state, n]) => stat(badge(taskState(state)), `count-${taskState(state)}`, null, fmtInt(n)))),
        card(tasks.length < total ? `Newest ${tasks.length} tasks` : 'Tasks', tasks.length === 0 ? emptyState('No tasks yet.', 'tasks-empty') : table([
          { key: 'id', label: 'Task', render: (t) => h('code', { class: 'id' }, t.id) },
          { key: 'contextId', render: (t) => h('code', { class: 'id' }, t.contextId) },
          { key: 'agent' },
          { key: 'state', field: 'state', render: (t) => badge(taskState(t.state)) },
          { key: 'updatedMs', label: 'Updated', render: (t) => timeCell(t.updatedMs) },
        ], tasks, { id: 'tasks-table', rowAttrs: (t) => ({ 'data-task': t.id }) })));
    },
  };
}

// --- Config ---------------------------------------------------------------------------

function configPage() {
  let entries = [];
  const filter = h('input', { type: 'search', id: 'config-filter', placeholder: 'Filter by key or value', 'aria-label': 'Filter' });
  const count = h('span', { class: 'muted', id: 'config-count' });
  const tbody = h('tbody', null);
  const body = h('div', null, loading());
  const tableEl = h('div', { class: 'table-wrap' }, h('table', { class: 'table table-config', id: 'config-table' },
    h('thead', null, h('tr', null, h('th', null, 'Key'), h('th', null, 'Value'))), tbody));
  const root = h('div', { class: 'stack' }, h('div', { class: 'toolbar' }, filter, h('span', { class: 'spacer' }), count), body);

  // Shows the entries matching the filter (case-insensitive, key or value).
  const apply = () => {
    const q = filter.value.trim().toLowerCase();
    const shown = entries.filter(([k, v]) => !q || k.toLowerCase().includes(q) || String(v).toLowerCase().includes(q));
    count.textContent = `${shown.length} of ${entries.length} settings`;
    fill(tbody, shown.map(([k, v]) => h('tr', { 'data-key': k }, h('td', null, h('code', null, k)), h('td', { class: 'config-value' }, valueNode(v)))));
    if (shown.length === 0) {
      tbody.append(h('tr', null, h('td', { colspan: 2, class: 'empty-cell' }, entries.length ? 'No setting matches the filter.' : 'No settings.')));
    }
  };
  filter.addEventListener('input', apply);

  return {
    title: 'Configuration',
    root,
    load: async () => (await api('/admin/config')).data || {},
    render(cfg) {
      entries = Object.entries(cfg).sort((a, b) => a[0].localeCompare(b[0]));
      if (!tableEl.isConnected) fill(body, tableEl);
      apply();
    },
  };
}

// --- Page registry and start-up --------------------------------------------------------

const PAGES = {
  overview: overviewPage,
  topics: topicsPage,
  subscriptions: subscriptionsPage,
  deadletters: deadLettersPage,
  cluster: clusterPage,
  connectors: connectorsPage,
  links: linksPage,
  tasks: tasksPage,
  config: configPage,
};

function init() {
  $('#sign-in-form').addEventListener('submit', signIn);
  $('#sign-out').addEventListener('click', () => signOut());
  window.addEventListener('hashchange', () => { if (getToken()) route(); });
  document.addEventListener('visibilitychange', () => { if (!document.hidden && shell.again && getToken()) refreshNow(); });
  setInterval(() => { if (getToken()) tickUpdated(); }, 1000);
  if (getToken()) showApp(); else showSignIn();
}

if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init); else init();

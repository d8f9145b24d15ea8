/*
 * The operator's page, served at `/ops`: polls GET /v1/ops/overview every 2 s and shows each Raft
 * group (leader, term, outbox backlog, and every replica's role, term, log indexes and lag) and
 * each show's seats over time as an SVG chart drawn here. Plain ES2020, no dependencies; served
 * under `Content-Security-Policy: default-src 'self'` (no inline code or styles).
 *
 * The operator token is asked for only when the node refuses without it (401/403; a --dev
 * cluster may need none), and kept in sessionStorage for the tab's life.
 *
 * Test hooks (stable ids and data attributes):
 *   #messages                 latest message (aria-live); data-code=<error code> for an error
 *   #token-panel, #token-form, #token, #token-save   the sign-in form (shown on 401/403)
 *   #forget-token             sign out (forget the stored token)
 *   #ops-status               data-state = loading | ok | stale | auth; data-at-ms = the
 *                             overview's at_ms; text "Updated … from node N"
 *   #groups (table), #groups-body
 *     [data-testid="group"][data-group-id="0"]         a group's row: data-leader-id,
 *                                                      data-term, data-outbox-backlog
 *     [data-testid="replica"][data-group-id][data-node-id]  a replica's row: data-role,
 *                                                      data-reachable; cells [data-field=
 *                                                      "address|reachable|role|term|last_log_index|
 *                                                      committed_index|applied_index|lag"]
 *   #shows
 *     [data-testid="show"][data-show-id="1600"]        a show's card: data-group-id, data-status
 *       [data-testid="chart"]                          its SVG chart (lines .line.free|held|booked|reserved)
 *       [data-field="free|held|booked|reserved"]       its current numbers
 */

import { $, h, s } from '{{asset:dom.js}}';

const POLL_MS = 2000;
const TOKEN_KEY = 'booking.operator';
const SERIES = ['free', 'held', 'booked', 'reserved'];

const ERROR_MESSAGES = {
  network_error: 'The node cannot be reached.',
  unauthenticated: 'This node needs the operator token.',
  forbidden: 'That is not the operator token.',
  rate_limited: 'Too many requests; slowing down.',
  not_leader: 'The node is switching leaders.',
  no_leader: 'A group has no leader right now.',
  unavailable: 'The node is briefly unavailable.',
  not_found: 'This node does not serve the operations overview.',
  internal: 'The node failed to answer.',
};

// ---- Messages and status ---------------------------------------------------------------------

function say(text, code) {
  const box = $('messages');
  box.textContent = text;
  box.className = 'messages error';
  if (code) box.dataset.code = code;
  else delete box.dataset.code;
  box.hidden = false;
}

function clearMessage() {
  $('messages').hidden = true;
}

function setStatus(state, text) {
  const status = $('ops-status');
  status.dataset.state = state;
  status.textContent = text;
}

const number = (value) => (typeof value === 'number' ? value.toLocaleString() : '—');
const clockTime = (ms) => new Date(ms).toLocaleTimeString();

// ---- Fetching the overview ----------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** GET /v1/ops/overview with the stored token, if any. */
async function fetchOverview() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { Accept: 'application/json' };
  if (token) headers.Authorization = `Bearer ${token}`;
  let response;
  try {
    response = await fetch('/v1/ops/overview', { headers, cache: 'no-store' });
  } catch {
    throw new ApiError(0, 'network_error', 'network error');
  }
  if (response.ok) return response.json();
  let body = {};
  try {
    body = await response.json();
  } catch {
    // Not JSON: the status says enough.
  }
  const error = body && typeof body.error === 'object' ? body.error : body || {};
  throw new ApiError(response.status, error.code || response.headers.get('booking-code') || `http_${response.status}`,
    error.message || response.statusText);
}

let pollTimer = null;

/** One poll; the next is scheduled after it ends, so slow answers never pile up. */
async function poll() {
  clearTimeout(pollTimer);
  try {
    const overview = await fetchOverview();
    clearMessage();
    render(overview);
  } catch (error) {
    if (error.status === 401 || error.status === 403) {
      askForToken(error);
      return; // polling resumes when a token is given
    }
    setStatus('stale', `Not updated since ${$('ops-status').dataset.atMs ? clockTime(Number($('ops-status').dataset.atMs)) : 'loading'}: retrying.`);
    say(`${ERROR_MESSAGES[error.code] || error.message} (${error.code})`, error.code);
  }
  pollTimer = setTimeout(poll, POLL_MS);
}

function askForToken(error) {
  if (sessionStorage.getItem(TOKEN_KEY)) say(ERROR_MESSAGES[error.code] || error.message, error.code);
  sessionStorage.removeItem(TOKEN_KEY);
  setStatus('auth', 'Waiting for the operator token.');
  $('token-panel').hidden = false;
  $('forget-token').hidden = true;
  $('token').focus();
}

function onTokenSubmit(event) {
  event.preventDefault();
  const token = $('token').value.trim();
  if (!token) return;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('token').value = '';
  $('token-panel').hidden = true;
  $('forget-token').hidden = false;
  clearMessage();
  setStatus('loading', 'Loading…');
  poll();
}

function onForgetToken() {
  clearTimeout(pollTimer);
  sessionStorage.removeItem(TOKEN_KEY);
  $('forget-token').hidden = true;
  poll();
}

// ---- Rendering ----------------------------------------------------------------------------------

function render(overview) {
  const status = $('ops-status');
  status.dataset.atMs = String(overview.at_ms);
  setStatus('ok', `Updated ${clockTime(overview.at_ms)} from node ${overview.node_id}.`);
  $('forget-token').hidden = !sessionStorage.getItem(TOKEN_KEY);
  $('groups-body').replaceChildren(...overview.groups.flatMap(groupRows));
  $('shows').replaceChildren(...(overview.shows.length
    ? overview.shows.map(showCard)
    : [h('p', { class: 'muted', text: 'No shows yet.' })]));
}

function groupRows(group) {
  const header = h('tr', {
    class: 'group-row', 'data-testid': 'group', 'data-group-id': group.group_id,
    'data-leader-id': group.leader_id ?? '', 'data-term': group.term, 'data-outbox-backlog': group.outbox_backlog,
  }, h('td', { colspan: 10 },
    `Group ${group.group_id}${group.group_id === 0 ? ' (metadata)' : ''}: `,
    group.leader_id === null || group.leader_id === undefined
      ? h('span', { class: 'unreachable', text: 'no leader' })
      : `leader node ${group.leader_id}`,
    `, term ${number(group.term)}, outbox backlog ${number(group.outbox_backlog)}`));
  return [header, ...group.replicas.map((replica) => replicaRow(group, replica))];
}

function replicaRow(group, replica) {
  const cell = (field, content, className) => h('td', { 'data-field': field, class: className }, content);
  const lagging = typeof replica.lag === 'number' && replica.lag > 0;
  return h('tr', {
    'data-testid': 'replica', 'data-group-id': group.group_id, 'data-node-id': replica.node_id,
    'data-role': replica.role, 'data-reachable': String(replica.reachable),
  },
  h('td', { text: group.group_id }),
  h('th', { scope: 'row', text: `node ${replica.node_id}` }),
  cell('address', replica.address || '—'),
  cell('reachable', replica.reachable ? 'yes' : 'no', replica.reachable ? null : 'unreachable'),
  cell('role', replica.role, replica.role === 'leader' ? 'role-leader' : null),
  cell('term', number(replica.term), 'num'),
  cell('last_log_index', number(replica.last_log_index), 'num'),
  cell('committed_index', number(replica.committed_index), 'num'),
  cell('applied_index', number(replica.applied_index), 'num'),
  cell('lag', number(replica.lag), lagging ? 'num lagging' : 'num'));
}

function showCard(show) {
  const history = show.history || [];
  const latest = history[history.length - 1] || {};
  const title = show.title || `Show ${show.show_id}`;
  return h('article', {
    class: 'chart-card', 'data-testid': 'show', 'data-show-id': show.show_id,
    'data-group-id': show.group_id, 'data-status': show.status,
  },
  h('h3', { text: title }),
  h('p', { class: 'muted', text: `Show ${show.show_id} · group ${show.group_id} · ${String(show.status || '').replace('_', ' ')} · ${number(show.seat_count)} seats` }),
  h('p', { class: 'counts' }, ...SERIES.map((series) => h('span', {},
    h('span', { class: `key ${series}`, 'aria-hidden': 'true' }),
    `${series} `,
    h('strong', { 'data-field': series, text: number(latest[series]) })))),
  chart(show, title, history));
}

// ---- The chart ----------------------------------------------------------------------------------

const CHART = { width: 400, height: 170, left: 44, right: 10, top: 10, bottom: 22 };

/** Seats by status over time: one polyline per series, time across, seats up. */
function chart(show, title, history) {
  const svg = s('svg', {
    class: 'chart', viewBox: `0 0 ${CHART.width} ${CHART.height}`, role: 'img', 'data-testid': 'chart',
    'aria-label': `Seats of ${title} over time`,
  });
  const plotRight = CHART.width - CHART.right;
  const plotBottom = CHART.height - CHART.bottom;
  const top = Math.max(show.seat_count, 1);
  const first = history.length ? history[0].at_ms : 0;
  const span = history.length > 1 ? history[history.length - 1].at_ms - first : 0;
  const x = (at) => CHART.left + (span ? ((at - first) / span) * (plotRight - CHART.left) : plotRight - CHART.left);
  const y = (count) => plotBottom - (count / top) * (plotBottom - CHART.top);

  for (const fraction of [0, 0.5, 1]) {
    const level = y(top * fraction);
    svg.append(s('line', { class: fraction ? 'grid-line' : 'axis', x1: CHART.left, x2: plotRight, y1: level, y2: level }));
    const label = s('text', { class: 'axis-label', x: CHART.left - 4, y: level, 'text-anchor': 'end', 'dominant-baseline': 'central' });
    label.textContent = number(Math.round(top * fraction));
    svg.append(label);
  }
  svg.append(s('line', { class: 'axis', x1: CHART.left, x2: CHART.left, y1: CHART.top, y2: plotBottom }));

  if (!history.length) {
    const empty = s('text', { class: 'axis-label', x: (CHART.left + plotRight) / 2, y: (CHART.top + plotBottom) / 2, 'text-anchor': 'middle' });
    empty.textContent = 'No history yet';
    svg.append(empty);
    return svg;
  }
  for (const [at, anchor] of [[first, 'start'], [first + span, 'end']]) {
    const label = s('text', { class: 'axis-label', x: x(at), y: CHART.height - 6, 'text-anchor': anchor });
    label.textContent = clockTime(at);
    svg.append(label);
  }
  for (const series of SERIES) {
    const points = history.map((point) => `${x(point.at_ms).toFixed(1)},${y(point[series] || 0).toFixed(1)}`);
    // A single sample is a point: draw it as a short level line so it shows.
    if (points.length === 1) points.unshift(`${CHART.left},${y(history[0][series] || 0).toFixed(1)}`);
    svg.append(s('polyline', { class: `line ${series}`, points: points.join(' ') }));
  }
  return svg;
}

// ---- Start --------------------------------------------------------------------------------------

$('token-form').addEventListener('submit', onTokenSubmit);
$('forget-token').addEventListener('click', onForgetToken);
poll();

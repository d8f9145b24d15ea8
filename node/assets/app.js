/*
 * The buyer's page, served at `/`: search shows, open one, pick seats on its map, hold them,
 * pay, and follow the outcome live; with the waiting room and the waitlist when the show uses
 * them. Plain ES2020, no dependencies, no build step; served under `Content-Security-Policy:
 * default-src 'self'`, so no inline code or styles (element.style and SVG attributes only).
 *
 * Routes (location.hash):
 *   #/                       browse: upcoming shows
 *   #/search?<query>         search; <query> uses the names of GET /v1/search (q, city, ...)
 *   #/shows/<show_id>        one show
 *
 * Test hooks (stable ids and data attributes):
 *   #messages                 latest message (aria-live); data-kind="error|info",
 *                             data-code=<error code> for an error
 *   Search form: #q, #city, #postal-code, #genre, #from, #until (dates), #lat, #lon, #radius,
 *                #locate, #sort, #search (submit), #reset
 *   #results                  the list; each result [data-testid="result"][data-show-id="…"]
 *                             is a link (click or Enter opens the show)
 *   #results-summary, #more   "More results" (shown when there is a next page)
 *   Show view: #show-view, #show-title, #show-where, #show-when, #show-sales, #back, #legend
 *   #seatmap                  the SVG map; seats [data-seat="B12"] (label) with
 *                             data-number, data-status="free|held|booked|reserved|selected",
 *                             class "mine" on the buyer's own held/booked seats,
 *                             role="checkbox", aria-checked; Space/Enter toggles, arrows move
 *   #selection, #total        the chosen seats and their total
 *   #hold, #clear-selection   hold the chosen seats / clear the choice
 *   #status                   what happened; data-state = idle | holding | held | paying |
 *                             booked | declined | expired | cancelled | queued | granted |
 *                             waitlisted | offered | sold_out | closed | error
 *   #hold-panel, #held-seats, #countdown (data-remaining-ms, data-clock="server|client"),
 *   #pay, #release
 *   #confirmation, #confirmation-text (data-booking-id)
 *   #queue-panel, #queue (data-position while waiting, data-state = the ticket's state),
 *   #join-queue
 *   #waitlist-panel, #waitlist-join (the join form), #party-size, #join-waitlist,
 *   #waitlist-position (data-ahead),
 *   #offer, #offer-text, #offer-countdown, #accept-offer, #decline-offer
 */

import { $, h, s } from '{{asset:dom.js}}';

// ---- Settings ---------------------------------------------------------------------------------

const MAX_SEATS = 10; // a hold is 1..=10 seats
const POLL_MS = 2000; // availability refresh while a show is open
const MUTATION_ATTEMPTS = 4; // automatic tries of one action on 429/503/network errors
const RECONNECT_MIN_MS = 1000;
const RECONNECT_MAX_MS = 15000;
const CLASS_COLORS = ['#2e7d32', '#1565c0', '#ef6c00', '#8e24aa', '#00838f', '#c62828', '#6d4c41', '#ad1457'];
const AVAILABILITY = { F: 'free', H: 'held', B: 'booked', R: 'reserved' };

// ---- Messages for every error code (booking.v1.ErrorCode, lower snake case) -------------------

const ERROR_MESSAGES = {
  network_error: 'We could not reach the ticket service. Check your connection.',
  invalid_argument: 'Something in the request was not valid.',
  unauthenticated: 'Your session was not recognised. Please try again.',
  forbidden: 'You are not allowed to do that.',
  not_found: 'We could not find that.',
  method_not_allowed: 'That action is not supported.',
  payload_too_large: 'The request was too large.',
  unsupported_media_type: 'The request was in a format the server does not accept.',
  rate_limited: 'Too many requests right now. Please wait a moment.',
  not_leader: 'The service is switching servers.',
  no_leader: 'The service is electing a new leader.',
  unavailable: 'The service is briefly unavailable.',
  membership_refused: 'The cluster refused a membership change.',
  internal: 'Something went wrong on our side. Please try again.',
  show_not_found: 'This show does not exist.',
  show_exists: 'A show with this id already exists.',
  group_full: 'The cluster has no room for another show.',
  show_not_on_sale: 'This show is not on sale right now.',
  show_cancelled: 'This show was cancelled.',
  seat_out_of_range: 'That seat is not part of this show.',
  seat_unavailable: 'Sorry, some of those seats were just taken. Please choose others.',
  price_version_mismatch: 'The prices just changed. Please check the new prices and try again.',
  too_many_holds: 'You already hold as many seat groups as allowed for this show. Pay for or release one first.',
  grant_required: 'Please wait for your turn in the waiting room before holding seats.',
  ticket_not_found: 'We could not find your place in line.',
  grant_expired: 'Your turn ran out. Please join the line again.',
  ticket_not_active: 'Your place in line is no longer active.',
  admission_disabled: 'This show has no waiting room right now.',
  already_queued: 'You are already in line for this show.',
  queue_full: 'The line is full right now. Please try again in a moment.',
  not_owner: 'That belongs to another session.',
  hold_not_found: 'We could not find your held seats.',
  hold_expired: 'Your hold expired and the seats were released.',
  hold_not_active: 'Those seats are no longer held.',
  payment_in_progress: 'A payment is in progress for these seats.',
  payment_attempts_exhausted: 'Too many payment attempts for these seats. Please hold seats again.',
  payment_not_found: 'We could not find that payment.',
  payment_mismatch: 'The payment did not match the order.',
  booking_not_found: 'We could not find that booking.',
  booking_not_cancellable: 'This booking can no longer be cancelled.',
  waitlist_disabled: 'This show has no waitlist.',
  not_sold_out: 'Seats are still available: pick them on the map instead of joining the waitlist.',
  already_on_waitlist: 'You are already on the waitlist for this show.',
  entry_not_found: 'We could not find your waitlist place.',
  entry_not_active: 'Your waitlist place is no longer active.',
  offer_not_found: 'We could not find that offer.',
  offer_expired: 'The offer ran out; the seats went to the next person.',
  offer_not_active: 'That offer is no longer open.',
  idempotency_key_reused: 'That request conflicted with an earlier one. Please try again.',
  sink_not_found: 'No such event sink.',
  dead_letter_not_found: 'No such undelivered event.',
  waitlist_in_use: 'The waitlist rules cannot change while people are waiting.',
  not_a_lottery: 'This waitlist is not a lottery.',
  lottery_not_due: 'The lottery has not been drawn yet.',
  lottery_already_drawn: 'The lottery was already drawn.',
  catalog_not_found: 'We could not find that in the catalogue.',
  catalog_exists: 'That catalogue entry already exists.',
  catalog_retired: 'That catalogue entry was withdrawn.',
};

/** The message for an error: ours for its code, else the server's. */
function messageFor(error) {
  const ours = ERROR_MESSAGES[error.code];
  if (error.code === 'invalid_argument' && error.message) return `${ours} (${error.message})`;
  return ours || error.message || `Unexpected error (${error.code}).`;
}

// ---- DOM helpers --------------------------------------------------------------------------------

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Tells the buyer something in the aria-live region; an error also names its code. */
function say(text, kind = 'info', code) {
  const box = $('messages');
  box.textContent = text;
  box.className = `messages ${kind}`;
  box.dataset.kind = kind;
  if (code) box.dataset.code = code;
  else delete box.dataset.code;
  box.hidden = false;
}

function sayError(error) {
  // After the automatic retries gave up: the same click retries with the same key.
  const retry = isRetryable(error) ? ' Please try again in a moment.' : '';
  say(`${messageFor(error)}${retry}`, 'error', error.code);
}

function clearMessage() {
  $('messages').hidden = true;
}

/** The one status line of the purchase; `state` is a test hook. */
function setStatus(state, text) {
  const status = $('status');
  status.dataset.state = state;
  status.textContent = text;
}

// ---- Formatting ---------------------------------------------------------------------------------

const moneyFormats = new Map();

/** Minor units as money, with the currency's own number of decimals (EUR 2, JPY 0). */
function money(minor, currency) {
  let format = moneyFormats.get(currency);
  if (!format) {
    format = new Intl.NumberFormat(undefined, { style: 'currency', currency });
    moneyFormats.set(currency, format);
  }
  return format.format(minor / 10 ** format.resolvedOptions().maximumFractionDigits);
}

const dateTimeFormat = new Intl.DateTimeFormat(undefined, {
  weekday: 'short', year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
});

function dateTime(ms) {
  return dateTimeFormat.format(new Date(ms));
}

/** Milliseconds as m:ss (never negative). */
function minutesSeconds(ms) {
  const total = Math.max(0, Math.ceil(ms / 1000));
  return `${Math.floor(total / 60)}:${String(total % 60).padStart(2, '0')}`;
}

function plural(count, one, many) {
  return `${count} ${count === 1 ? one : many}`;
}

// ---- The cluster's clock ------------------------------------------------------------------------

/*
 * Deadlines (holds, grants, offers) are in log time: the leader's wall clock stamped on each log
 * entry. Every `as_of.log_time_ms` we receive is at most the cluster's current time, so the
 * largest (log time − our clock) seen is our best estimate of how far our clock is off. Until
 * one arrives, we count on the device's clock and say so.
 */
const clusterClock = {
  offset: null,
  observe(asOf) {
    if (!asOf || !asOf.log_time_ms) return;
    const offset = asOf.log_time_ms - Date.now();
    if (this.offset === null || offset > this.offset) this.offset = offset;
  },
  now() {
    return Date.now() + (this.offset ?? 0);
  },
  source() {
    return this.offset === null ? 'client' : 'server';
  },
};

/** Shows the time left until `deadlineMs` (log time) in `element`. */
function renderCountdown(element, prefix, deadlineMs) {
  const remaining = deadlineMs - clusterClock.now();
  const source = clusterClock.source();
  element.dataset.remainingMs = String(Math.max(0, remaining));
  element.dataset.clock = source;
  element.replaceChildren(
    remaining > 0 ? `${prefix} ${minutesSeconds(remaining)}` : `${prefix} 0:00 (ending…)`,
    ' ',
    h('span', { class: 'clock-source', text: source === 'server' ? "(timed by the ticket service's clock)" : "(timed by your device's clock)" }),
  );
}

// ---- HTTP: sessions, errors, idempotent retries -------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message, details = {}, retryAfterS = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
    this.retryAfterS = retryAfterS;
  }
}

/** The error of a non-2xx response: the body `{code, message, details}` (or `{error: {…}}`). */
async function readError(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // A body that is not JSON (a proxy's page): the status says enough.
  }
  const error = body && typeof body.error === 'object' ? body.error : body || {};
  const code = error.code || response.headers.get('booking-code') || `http_${response.status}`;
  const retryAfter = Number(response.headers.get('Retry-After'));
  return new ApiError(response.status, code, error.message || response.statusText, error.details,
    Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : null);
}

const RETRYABLE_CODES = new Set(['network_error', 'rate_limited', 'not_leader', 'no_leader', 'unavailable']);

/** Whether the same request may simply be sent again: no answer, too busy, or no leader. */
function isRetryable(error) {
  return error instanceof ApiError
    && (RETRYABLE_CODES.has(error.code) || error.status === 0 || error.status === 429 || error.status >= 502);
}

function retryDelayMs(error, attempt) {
  return error.retryAfterS ? error.retryAfterS * 1000 : Math.min(500 * 2 ** attempt, 8000);
}

/** crypto.randomUUID exists only in secure contexts; a node reached by plain http on a LAN is not one. */
function newKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

const SESSION_KEY = 'booking.session';

/** The buyer's session token: kept for the tab's life so a reload keeps one's holds. */
async function sessionToken() {
  let token = sessionStorage.getItem(SESSION_KEY);
  if (!token) {
    const created = await call('POST', '/v1/sessions', { auth: false });
    token = created.token;
    sessionStorage.setItem(SESSION_KEY, token);
  }
  return token;
}

/**
 * One request. Buyer calls carry the session token; a token the cluster no longer recognises
 * (401) is replaced once. Throws ApiError (status 0 when the server could not be reached).
 */
async function call(method, path, { body, key, auth = true, renewSession = true } = {}) {
  const headers = { Accept: 'application/json' };
  if (auth) headers.Authorization = `Bearer ${await sessionToken()}`;
  if (key) headers['Idempotency-Key'] = key;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method, headers, cache: 'no-store', body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, 'network_error', 'network error');
  }
  if (response.status === 401 && auth && renewSession) {
    sessionStorage.removeItem(SESSION_KEY);
    return call(method, path, { body, key, auth, renewSession: false });
  }
  if (!response.ok) throw await readError(response);
  return response.status === 204 ? null : response.json();
}

/*
 * Idempotency keys by action ("hold these seats of this show at this price version", "pay
 * for this hold"): an action keeps its key until it gets a definite answer, so a retry after a
 * network error, a 429 or a 503 (automatic, or a click after we gave up) is the same request to
 * the cluster and can never hold or charge twice. A definite answer frees the key: doing the
 * same thing again later (paying again after a decline) is a new request.
 */
const pendingKeys = new Map();

async function mutate(action, method, path, body) {
  if (!pendingKeys.has(action)) pendingKeys.set(action, newKey());
  const key = pendingKeys.get(action);
  for (let attempt = 1; ; attempt += 1) {
    try {
      const result = await call(method, path, { body, key });
      pendingKeys.delete(action);
      return result;
    } catch (error) {
      if (!isRetryable(error)) {
        pendingKeys.delete(action);
        throw error;
      }
      if (attempt >= MUTATION_ATTEMPTS) throw error;
      say(`${messageFor(error)} Retrying shortly…`, 'info', error.code);
      await sleep(retryDelayMs(error, attempt));
    }
  }
}

// ---- Server-sent events over fetch --------------------------------------------------------------

/*
 * The event streams (/v1/holds/{id}/events, ...) authenticate with `Authorization: Bearer`,
 * which EventSource cannot send, so we read them with fetch and parse the SSE framing here.
 */

/** Yields `{type, data}` for each event of an SSE body. */
async function* sseEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let type = 'message';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      // A trailing "\r" may be the first half of "\r\n": keep it for the next chunk.
      const end = buffer.endsWith('\r') ? buffer.length - 1 : buffer.length;
      const lines = buffer.slice(0, end).split(/\r\n|\r|\n/);
      buffer = lines.pop() + buffer.slice(end);
      for (const line of lines) {
        if (line === '') {
          if (data.length) yield { type, data: data.join('\n') };
          type = 'message';
          data = [];
        } else if (!line.startsWith(':')) {
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
          if (field === 'event') type = text;
          else if (field === 'data') data.push(text);
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * Follows a buyer's event stream: `onEvent(type, json)` for each event; when it returns true
 * the watch ends. A stream that breaks (network, 429, 503, a server restart) is reopened with
 * backoff: each stream starts with the current view, so nothing is missed. A definite refusal
 * (403, 404, ...) is passed to `onFail` and ends the watch. Returns `{stop}`.
 */
function watch(path, onEvent, onFail) {
  const controller = new AbortController();
  let stopped = false;
  const stop = () => {
    stopped = true;
    controller.abort();
  };
  (async () => {
    let delay = RECONNECT_MIN_MS;
    while (!stopped) {
      try {
        const response = await fetch(path, {
          headers: { Accept: 'text/event-stream', Authorization: `Bearer ${await sessionToken()}` },
          cache: 'no-store',
          signal: controller.signal,
        });
        if (!response.ok) throw await readError(response);
        delay = RECONNECT_MIN_MS;
        for await (const event of sseEvents(response.body)) {
          const json = JSON.parse(event.data);
          if (event.type === 'error') throw new ApiError(200, json.code, json.message, json.details);
          if (onEvent(event.type, json)) {
            stop();
            return;
          }
        }
      } catch (error) {
        if (stopped) return;
        if (error instanceof ApiError && !isRetryable(error)) {
          stopped = true;
          onFail(error);
          return;
        }
      }
      await sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  })();
  return { stop };
}

// ---- Routing ------------------------------------------------------------------------------------

function route() {
  const hash = location.hash || '#/';
  if (!hash.startsWith('#/')) return; // an in-page anchor (the skip link), not a route
  const show = /^#\/shows\/(\d+)$/.exec(hash);
  if (show) {
    openShow(show[1]);
    return;
  }
  closeShow();
  const search = /^#\/search(?:\?(.*))?$/.exec(hash);
  openSearch(new URLSearchParams(search ? search[1] || '' : ''));
}

// ---- Search -------------------------------------------------------------------------------------

const SEARCH_PARAMS = ['q', 'city', 'postal_code', 'lat', 'lon', 'radius_km', 'from_ms', 'until_ms', 'genre', 'sort'];
const TEXT_FIELDS = { q: 'q', city: 'city', postal_code: 'postal-code', genre: 'genre', lat: 'lat', lon: 'lon', radius_km: 'radius' };
const DAY_MS = 24 * 60 * 60 * 1000;

const search = { params: null, cursor: null, generation: 0 };

/** yyyy-mm-dd of a local date input as Unix ms of that day's local midnight. */
function localMidnight(value, addDays = 0) {
  const [year, month, day] = value.split('-').map(Number);
  return new Date(year, month - 1, day + addDays).getTime();
}

function dateInputValue(ms) {
  const date = new Date(ms);
  const pad = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

/** The search form as GET /v1/search parameters, or an error message for the buyer. */
function formParams() {
  const params = new URLSearchParams();
  for (const [name, id] of Object.entries(TEXT_FIELDS)) {
    const value = $(id).value.trim();
    if (value) params.set(name, value);
  }
  // The "until" date is inclusive: the range ends at the next local midnight.
  if ($('from').value) params.set('from_ms', String(localMidnight($('from').value)));
  if ($('until').value) params.set('until_ms', String(localMidnight($('until').value, 1)));
  const sort = $('sort').value;
  if (sort !== 'start') params.set('sort', sort);

  const located = params.has('lat') && params.has('lon');
  if (params.has('lat') !== params.has('lon')) return { error: 'Give both latitude and longitude, or neither.' };
  if (params.has('radius_km') && !located) return { error: 'A distance needs a latitude and a longitude.' };
  if (sort === 'distance' && !located) return { error: 'Sorting by distance needs a latitude and a longitude.' };
  if (sort === 'relevance' && !params.has('q')) return { error: 'Sorting by relevance needs keywords.' };
  return { params };
}

/** Fills the form from search parameters (a shared or reloaded #/search link). */
function fillForm(params) {
  for (const [name, id] of Object.entries(TEXT_FIELDS)) $(id).value = params.get(name) || '';
  $('from').value = params.has('from_ms') ? dateInputValue(Number(params.get('from_ms'))) : '';
  $('until').value = params.has('until_ms') ? dateInputValue(Number(params.get('until_ms')) - DAY_MS) : '';
  $('sort').value = params.get('sort') || 'start';
}

function openSearch(params) {
  $('show-view').hidden = true;
  $('search-view').hidden = false;
  document.title = 'Tickets';
  const clean = new URLSearchParams();
  for (const name of SEARCH_PARAMS) if (params.get(name)) clean.set(name, params.get(name));
  fillForm(clean);
  $('results-heading').textContent = [...clean.keys()].length ? 'Results' : 'Upcoming shows';
  runSearch(clean, null);
}

async function runSearch(params, cursor) {
  const generation = ++search.generation;
  const query = new URLSearchParams(params);
  if (cursor) query.set('cursor', cursor);
  $('more').disabled = true;
  if (!cursor) $('results-summary').textContent = 'Searching…';
  try {
    const page = await call('GET', `/v1/search?${query}`, { auth: false });
    if (generation !== search.generation) return; // a newer search replaced this one
    search.params = params;
    search.cursor = page.next_cursor;
    renderResults(page.results, Boolean(cursor));
  } catch (error) {
    if (generation !== search.generation) return;
    $('results-summary').textContent = 'The search failed.';
    sayError(error);
  } finally {
    $('more').disabled = false;
  }
}

function renderResults(results, append) {
  const list = $('results');
  if (!append) list.replaceChildren();
  const items = results.map(resultItem);
  list.append(...items);
  const count = list.children.length;
  $('results-summary').textContent = count
    ? `Showing ${plural(count, 'show', 'shows')}${search.cursor ? '; more below.' : '.'}`
    : 'No shows match. Try fewer filters.';
  $('more').hidden = !search.cursor;
  // Keyboard users who asked for more land on the first new result.
  if (append && items.length) items[0].querySelector('a').focus();
}

/** Images from other origins are left out: the page's CSP only allows its own. */
function sameOrigin(url) {
  try {
    return new URL(url, location.href).origin === location.origin;
  } catch {
    return false;
  }
}

function resultItem(result) {
  const where = [result.venue_name, result.hall_name, [result.city, result.postal_code].filter(Boolean).join(' ')]
    .filter(Boolean).join(' · ');
  const distance = typeof result.distance_km === 'number' ? `${result.distance_km.toFixed(1)} km away` : null;
  const image = (result.images || []).find(sameOrigin);
  return h('li', {},
    h('a', { class: 'result', href: `#/shows/${result.show_id}`, 'data-testid': 'result', 'data-show-id': result.show_id },
      h('span', { class: 'result-when', text: dateTime(result.starts_at_ms) }),
      h('span', {},
        h('span', { class: 'result-title', text: result.title }), ' ',
        result.genre ? h('span', { class: 'tag', text: result.genre }) : null,
        h('span', { class: 'result-where', text: where }),
        distance ? h('span', { class: 'result-extra', text: ` · ${distance}` }) : null),
      image ? h('img', { class: 'result-image', src: image, alt: '' }) : h('span'),
      result.description ? h('span', { class: 'result-description', text: result.description }) : null));
}

function onSearchSubmit(event) {
  event.preventDefault();
  const { params, error } = formParams();
  if (error) {
    say(error, 'error', 'invalid_argument');
    return;
  }
  clearMessage();
  navigate(`#/search?${params}`);
}

/** Goes to `hash`; the same hash fires no hashchange, so route again directly. */
function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function onLocate() {
  if (!navigator.geolocation) {
    say('This browser cannot tell us where you are; type a latitude and longitude instead.', 'error');
    return;
  }
  navigator.geolocation.getCurrentPosition(
    (position) => {
      $('lat').value = position.coords.latitude.toFixed(5);
      $('lon').value = position.coords.longitude.toFixed(5);
      if (!$('radius').value) $('radius').value = '25';
      $('sort').value = 'distance';
    },
    () => say('We could not get your location; type a latitude and longitude instead.', 'error'),
  );
}

// ---- One show: state --------------------------------------------------------------------------

/*
 * Everything about the open show lives in `current`; closing the show (navigating away) stops
 * its polling, streams and timers, and every async continuation checks `ctx.closed`.
 */
let current = null;

const LIVE_HOLD = new Set(['held', 'processing']);

/** Whether our hold still owns its seats (an answer may have ended it before its next view). */
function liveHold(ctx) {
  return Boolean(ctx.hold && LIVE_HOLD.has(ctx.hold.state) && !['expired', 'cancelled', 'booked'].includes(ctx.phase));
}

/** What we remember per show for a reload: our hold, ticket and waitlist entry. */
function remembered(ctx) {
  try {
    return JSON.parse(sessionStorage.getItem(`booking.show.${ctx.id}`)) || {};
  } catch {
    return {};
  }
}

function remember(ctx, changes) {
  const next = { ...remembered(ctx), ...changes };
  for (const name of Object.keys(next)) if (next[name] === null) delete next[name];
  sessionStorage.setItem(`booking.show.${ctx.id}`, JSON.stringify(next));
}

function closeShow() {
  if (!current) return;
  current.closed = true;
  clearTimeout(current.pollTimer);
  clearInterval(current.ticker);
  for (const stream of Object.values(current.streams)) stream.stop();
  current = null;
}

async function openShow(id) {
  if (current && current.id === id) return;
  closeShow();
  const ctx = {
    id, closed: false, show: null, seats: [], elements: [], byNumber: false, status: [], painted: [],
    selected: new Set(), mine: new Map(), focus: 0, etag: null, version: null, pollTimer: null, ticker: null,
    streams: {}, hold: null, phase: null, ticket: null, entry: null, busy: false,
  };
  current = ctx;
  $('search-view').hidden = true;
  $('show-view').hidden = false;
  resetShowView();
  try {
    const [show, availability] = await Promise.all([
      call('GET', `/v1/shows/${id}`, { auth: false }),
      fetchAvailability(ctx),
    ]);
    if (ctx.closed) return;
    ctx.show = show;
    renderShowHeader(ctx);
    await loadSeats(ctx, availability);
    if (ctx.closed) return;
    drawMap(ctx);
    applyAvailability(ctx, availability);
    restingStatus(ctx);
    ctx.pollTimer = setTimeout(() => poll(ctx), POLL_MS);
    ctx.ticker = setInterval(() => renderCountdowns(ctx), 500);
    await resume(ctx);
    if (ctx.closed) return;
    // The waiting room comes first: join the line at once unless this tab already holds or booked.
    const busyWithHold = liveHold(ctx) || ctx.phase === 'booked';
    if (show.admission.enabled && show.status === 'on_sale' && !ctx.ticket && !busyWithHold) await joinQueue(ctx);
  } catch (error) {
    if (ctx.closed) return;
    setStatus('error', 'This show could not be loaded.');
    sayError(error);
  }
  updateControls(ctx);
}

function resetShowView() {
  for (const id of ['show-title', 'show-where', 'show-when', 'show-sales', 'selection', 'held-seats', 'countdown', 'queue', 'waitlist-position']) {
    $(id).replaceChildren();
  }
  $('seatmap').replaceChildren();
  $('legend').replaceChildren();
  $('total').textContent = '—';
  for (const id of ['hold-panel', 'confirmation', 'queue-panel', 'waitlist-panel', 'offer', 'join-queue']) $(id).hidden = true;
  setStatus('idle', 'Loading the show…');
  clearMessage();
}

const SALES = {
  draft: 'Sales have not opened yet.',
  on_sale: 'On sale.',
  closed: 'Sales are closed.',
  cancelled: 'This show was cancelled.',
};

/** The status line when nothing is in flight: what the buyer can do next. */
function restingStatus(ctx) {
  const { show, ticket } = ctx;
  if (show.status !== 'on_sale') setStatus('closed', SALES[show.status] || 'Not on sale.');
  else if (ticket?.state === 'granted') setStatus('granted', "It's your turn! Choose your seats and hold them.");
  else if (ticket?.state === 'waiting') setStatus('queued', `You are in the waiting room: number ${ticket.position} in line.`);
  else if (ctx.soldOut) setStatus('sold_out', 'This show is sold out.');
  else setStatus('idle', 'Choose seats to begin.');
}

function renderShowHeader(ctx) {
  const { show } = ctx;
  const listing = show.listing;
  const title = listing ? listing.title : `Show ${show.show_id}`;
  document.title = `${title} — Tickets`;
  $('show-title').textContent = title;
  $('show-where').textContent = listing ? [listing.venue_name, listing.hall_name, listing.city].filter(Boolean).join(' · ') : '';
  $('show-when').textContent = listing ? dateTime(listing.starts_at_ms) : '';
  $('queue-panel').hidden = !show.admission.enabled;
}

// ---- One show: seats and the map ----------------------------------------------------------------

/**
 * The show's seats, by seat number: `{label, cls, x, y, section}`. A show in a hall of the
 * catalog takes its hall's geometry; a show outside the catalog (a bare demo show) gets a
 * plain grid of numbered seats, held by number instead of label.
 */
async function loadSeats(ctx, availability) {
  const hallId = availability.hall_id ?? ctx.show.listing?.hall_id ?? null;
  if (hallId !== null) {
    const geometry = await call('GET', `/v1/halls/${hallId}/geometry`, { auth: false });
    const sectionOf = (number) => geometry.sections.find(
      (section) => number >= section.first_seat && number < section.first_seat + section.seat_count);
    ctx.seats = geometry.seats.map((seat, number) => ({
      label: seat.label, cls: seat.class, x: seat.x, y: seat.y, section: sectionOf(number)?.name || '',
    }));
    ctx.bounds = { minX: geometry.min[0], minY: geometry.min[1], maxX: geometry.max[0], maxY: geometry.max[1] };
    return;
  }
  const map = await call('GET', `/v1/shows/${ctx.id}/seats`, { auth: false });
  const perRow = Math.max(10, Math.ceil(Math.sqrt(map.classes.length * 2)));
  ctx.byNumber = true;
  ctx.seats = map.classes.map((cls, number) => ({
    label: String(number), cls, x: number % perRow, y: Math.floor(number / perRow), section: `Class ${cls + 1}`,
  }));
  const rows = Math.ceil(map.classes.length / perRow);
  ctx.bounds = { minX: 0, minY: 0, maxX: Math.min(perRow, map.classes.length) - 1, maxY: rows - 1 };
}

function classColor(cls) {
  return CLASS_COLORS[cls % CLASS_COLORS.length];
}

function priceOf(ctx, cls) {
  return ctx.show.prices_minor[cls] ?? 0;
}

/** The smallest distance between neighbouring seats: the unit the drawing is scaled by. */
function seatPitch(seats) {
  let pitch = Infinity;
  for (let i = 1; i < seats.length; i += 1) {
    const distance = Math.hypot(seats[i].x - seats[i - 1].x, seats[i].y - seats[i - 1].y);
    if (distance > 0 && distance < pitch) pitch = distance;
  }
  return Number.isFinite(pitch) ? pitch : 1;
}

function drawMap(ctx) {
  const map = $('seatmap');
  const { seats } = ctx;
  const pitch = seatPitch(seats);
  const { minX, minY, maxX, maxY } = ctx.bounds;
  // One pitch of margin on each side (two on the left, for the row letters).
  map.setAttribute('viewBox', `${minX - 2 * pitch} ${minY - pitch} ${maxX - minX + 3 * pitch} ${maxY - minY + 2 * pitch}`);
  map.setAttribute('preserveAspectRatio', 'xMidYMid meet');
  const fragment = document.createDocumentFragment();
  ctx.elements = [];
  let previousRow = null;
  seats.forEach((seat, number) => {
    const row = /^[A-Za-z]+/.exec(seat.label)?.[0] ?? null;
    if (row && row !== previousRow) {
      const letter = s('text', {
        x: seat.x - pitch, y: seat.y, 'font-size': pitch * 0.6, 'text-anchor': 'middle',
        'dominant-baseline': 'central', class: 'map-label', 'aria-hidden': 'true',
      });
      letter.textContent = row;
      fragment.append(letter);
    }
    previousRow = row;
    const circle = s('circle', {
      cx: seat.x, cy: seat.y, r: pitch * 0.42, class: 'seat', fill: classColor(seat.cls),
      role: 'checkbox', tabindex: -1, 'data-seat': seat.label, 'data-number': number,
    });
    const title = s('title');
    title.textContent = `Seat ${seat.label}`;
    circle.append(title);
    ctx.elements.push(circle);
    fragment.append(circle);
  });
  map.replaceChildren(fragment);
  ctx.painted = [];
  renderLegend(ctx);
}

function renderLegend(ctx) {
  const classes = new Map();
  for (const seat of ctx.seats) {
    if (!classes.has(seat.cls)) classes.set(seat.cls, new Set());
    if (seat.section) classes.get(seat.cls).add(seat.section);
  }
  const item = (swatch, text) => h('span', { class: 'legend-item' }, swatch, text);
  const items = [...classes.entries()].sort((a, b) => a[0] - b[0]).map(([cls, sections]) => {
    const swatch = h('span', { class: 'swatch', 'aria-hidden': 'true' });
    swatch.style.background = classColor(cls);
    const name = [...sections].join(', ') || `Class ${cls + 1}`;
    return item(swatch, `${name}: ${money(priceOf(ctx, cls), ctx.show.currency)}`);
  });
  for (const [status, text] of [['selected', 'Your choice'], ['held', 'Held'], ['booked', 'Sold'], ['reserved', 'Kept for the waitlist']]) {
    items.push(item(h('span', { class: `swatch ${status}`, 'aria-hidden': 'true' }), text));
  }
  $('legend').replaceChildren(...items);
}

/** A seat as drawn: our own hold or booking first, then the buyer's choice, then the cluster's map. */
function seatStatus(ctx, number) {
  return ctx.mine.get(number) || (ctx.selected.has(number) ? 'selected' : ctx.status[number] || 'held');
}

const STATUS_WORDS = {
  free: 'free', selected: 'selected', held: 'held by someone else', booked: 'sold', reserved: 'kept for the waitlist',
};

function paintSeat(ctx, number) {
  const status = seatStatus(ctx, number);
  const mine = ctx.mine.has(number);
  const key = `${status}${mine}`;
  if (ctx.painted[number] === key) return;
  ctx.painted[number] = key;
  const element = ctx.elements[number];
  if (!element) return;
  const seat = ctx.seats[number];
  const word = mine ? (status === 'booked' ? 'booked by you' : 'held by you') : STATUS_WORDS[status];
  const price = money(priceOf(ctx, seat.cls), ctx.show.currency);
  element.dataset.status = status;
  element.classList.toggle('mine', mine);
  element.setAttribute('aria-checked', String(status === 'selected'));
  element.setAttribute('aria-disabled', String(status !== 'free' && status !== 'selected'));
  element.setAttribute('aria-label', `Seat ${seat.label}, ${seat.section}, ${price}, ${word}`);
}

function paintAll(ctx) {
  for (let number = 0; number < ctx.seats.length; number += 1) paintSeat(ctx, number);
  setRovingFocus(ctx, ctx.focus);
}

/** Only one seat is in the tab order (tabindex 0); arrow keys move between seats. */
function setRovingFocus(ctx, number) {
  const previous = ctx.elements[ctx.focus];
  if (previous) previous.setAttribute('tabindex', '-1');
  ctx.focus = number;
  const next = ctx.elements[number];
  if (next) next.setAttribute('tabindex', '0');
  return next;
}

/** The nearest seat from `number` in the direction of an arrow key, if any. */
function neighbour(ctx, number, key) {
  const [dx, dy] = { ArrowRight: [1, 0], ArrowLeft: [-1, 0], ArrowDown: [0, 1], ArrowUp: [0, -1] }[key];
  const from = ctx.seats[number];
  let best = null;
  let bestScore = Infinity;
  ctx.seats.forEach((seat, candidate) => {
    const along = (seat.x - from.x) * dx + (seat.y - from.y) * dy;
    if (along <= 0) return;
    const across = Math.abs((seat.x - from.x) * dy) + Math.abs((seat.y - from.y) * dx);
    const score = along + 3 * across; // prefer staying in the same row or column
    if (score < bestScore) {
      bestScore = score;
      best = candidate;
    }
  });
  return best;
}

function seatNumberOf(target) {
  const seat = target.closest('.seat');
  return seat ? Number(seat.dataset.number) : null;
}

function onMapClick(event) {
  const ctx = current;
  const number = seatNumberOf(event.target);
  if (!ctx || number === null) return;
  setRovingFocus(ctx, number);
  toggleSeat(ctx, number);
}

function onMapKey(event) {
  const ctx = current;
  const number = seatNumberOf(event.target);
  if (!ctx || number === null) return;
  if (event.key === ' ' || event.key === 'Enter') {
    event.preventDefault();
    toggleSeat(ctx, number);
  } else if (event.key.startsWith('Arrow')) {
    event.preventDefault();
    const next = neighbour(ctx, number, event.key);
    if (next !== null) setRovingFocus(ctx, next).focus();
  }
}

function toggleSeat(ctx, number) {
  if (!ctx.show) return;
  const label = ctx.seats[number].label;
  if (ctx.selected.has(number)) {
    ctx.selected.delete(number);
  } else if (liveHold(ctx)) {
    say('Pay for or release your held seats before choosing others.', 'info');
    return;
  } else if (seatStatus(ctx, number) !== 'free') {
    say(`Seat ${label} is not available.`, 'info');
    return;
  } else if (ctx.selected.size >= MAX_SEATS) {
    say(`You can choose up to ${MAX_SEATS} seats at a time.`, 'info');
    return;
  } else {
    ctx.selected.add(number);
  }
  paintSeat(ctx, number);
  renderSelection(ctx);
  updateControls(ctx);
}

function labelsOf(ctx, numbers) {
  return numbers.map((number) => ctx.seats[number]?.label ?? String(number));
}

function renderSelection(ctx) {
  const numbers = [...ctx.selected].sort((a, b) => a - b);
  $('selection').replaceChildren(...numbers.map((number) => {
    const seat = ctx.seats[number];
    return h('li', { text: `${seat.label} — ${seat.section}, ${money(priceOf(ctx, seat.cls), ctx.show.currency)}` });
  }));
  const total = numbers.reduce((sum, number) => sum + priceOf(ctx, ctx.seats[number].cls), 0);
  $('total').textContent = numbers.length ? money(total, ctx.show.currency) : '—';
}

// ---- One show: availability --------------------------------------------------------------------

/**
 * GET availability; null when unchanged since the last answer (304 for our ETag). Once we have
 * a map, we ask only for what changed since its version; the node answers with the changes, or
 * with the whole map when it cannot tell them.
 */
async function fetchAvailability(ctx) {
  const headers = ctx.etag ? { 'If-None-Match': ctx.etag } : {};
  const since = ctx.version ? `?since=${encodeURIComponent(ctx.version)}` : '';
  let response;
  try {
    response = await fetch(`/v1/shows/${ctx.id}/availability${since}`, { headers, cache: 'no-store' });
  } catch {
    throw new ApiError(0, 'network_error', 'network error');
  }
  if (response.status === 304) return null;
  if (!response.ok) throw await readError(response);
  ctx.etag = response.headers.get('ETag');
  return response.json();
}

async function poll(ctx) {
  try {
    const availability = await fetchAvailability(ctx);
    if (availability && !ctx.closed) applyAvailability(ctx, availability);
  } catch {
    // The next poll tries again; the map simply stays as it was meanwhile.
  }
  if (!ctx.closed) ctx.pollTimer = setTimeout(() => poll(ctx), POLL_MS);
}

function applyAvailability(ctx, availability) {
  clusterClock.observe(availability.as_of);
  if (availability.changes_since) {
    // Only the seats changed since our version; anything else is not ours to patch.
    if (availability.changes_since !== ctx.version) {
      ctx.version = null;
      ctx.etag = null;
      return;
    }
    availability.changed_seats.forEach((seat, i) => {
      if (seat < ctx.status.length) ctx.status[seat] = AVAILABILITY[availability.changed[i]] || 'held';
    });
  } else {
    ctx.status = [...availability.seats].map((char) => AVAILABILITY[char] || 'held');
  }
  ctx.version = availability.version;
  const free = ctx.status.filter((status) => status === 'free').length;
  ctx.soldOut = free === 0;
  $('show-sales').textContent = `${SALES[ctx.show.status] || ctx.show.status} ${plural(free, 'seat', 'seats')} of ${ctx.status.length} free.`;
  const lost = [...ctx.selected].filter((number) => ctx.status[number] !== 'free');
  for (const number of lost) ctx.selected.delete(number);
  if (lost.length) {
    say(`Sorry, ${lost.length === 1 ? 'seat' : 'seats'} ${labelsOf(ctx, lost).join(', ')} just went to someone else.`, 'info');
    renderSelection(ctx);
  }
  paintAll(ctx);
  if (['idle', 'sold_out'].includes($('status').dataset.state)) restingStatus(ctx);
  updateControls(ctx);
}

// ---- One show: controls ---------------------------------------------------------------------

function updateControls(ctx) {
  if (ctx !== current || !ctx.show) return;
  const { show } = ctx;
  const onSale = show.status === 'on_sale';
  const live = liveHold(ctx);
  const admitted = !show.admission.enabled || ctx.ticket?.state === 'granted';
  const count = ctx.selected.size;

  $('hold').disabled = ctx.busy || !onSale || live || !admitted || count === 0;
  $('hold').textContent = count > 1 ? `Hold ${count} seats` : 'Hold seats';
  $('clear-selection').disabled = count === 0;

  $('hold-panel').hidden = !live;
  // A declined payment was applied in the same log entry that gave the hold back: pay again
  // even before the hold's own view says so.
  const paying = ctx.phase === 'paying' || (ctx.hold?.state === 'processing' && ctx.phase !== 'declined');
  $('pay').disabled = ctx.busy || paying;
  $('pay').textContent = ctx.phase === 'declined' ? 'Try paying again' : 'Pay';
  $('release').disabled = ctx.busy || paying;

  const ticketLive = ctx.ticket && ['waiting', 'granted'].includes(ctx.ticket.state);
  $('join-queue').hidden = !(show.admission.enabled && onSale && !ticketLive && !live);

  const entryLive = ctx.entry && ['waiting', 'offered'].includes(ctx.entry.state);
  $('waitlist-panel').hidden = !(entryLive || (ctx.soldOut && show.waitlist.enabled && !live && onSale));
  $('waitlist-join').hidden = Boolean(entryLive);
  $('join-waitlist').disabled = ctx.busy;
  const offerOpen = ctx.entry?.state === 'offered' && ctx.entry.offer?.state === 'open';
  $('offer').hidden = !offerOpen;
  $('accept-offer').disabled = ctx.busy;
  $('decline-offer').disabled = ctx.busy;
}

/** Runs one buyer action with its buttons disabled meanwhile. */
async function act(ctx, action) {
  if (ctx.busy) return;
  ctx.busy = true;
  updateControls(ctx);
  try {
    await action();
  } finally {
    ctx.busy = false;
    updateControls(ctx);
  }
}

function renderCountdowns(ctx) {
  if (ctx.closed) return;
  if (liveHold(ctx)) {
    const prefix = ctx.hold.state === 'processing' ? 'Payment must finish within' : 'Seats held for';
    renderCountdown($('countdown'), prefix, ctx.hold.deadline_ms);
  }
  if (ctx.ticket?.state === 'granted' && ctx.ticket.grant_deadline_ms && !liveHold(ctx)) {
    renderCountdown($('queue'), "It's your turn! Hold seats within", ctx.ticket.grant_deadline_ms);
  }
  const offer = ctx.entry?.offer;
  if (ctx.entry?.state === 'offered' && offer?.state === 'open') {
    renderCountdown($('offer-countdown'), 'Answer within', offer.deadline_ms);
  }
}

// ---- One show: holding and paying -----------------------------------------------------------

async function holdSeats(ctx) {
  const numbers = [...ctx.selected].sort((a, b) => a - b);
  const body = ctx.byNumber
    ? { seats: numbers, price_version: ctx.show.price_version }
    : { seat_labels: labelsOf(ctx, numbers), price_version: ctx.show.price_version };
  if (ctx.show.admission.enabled && ctx.ticket?.state === 'granted') body.grant_id = ctx.ticket.ticket_id;
  setStatus('holding', `Holding ${plural(numbers.length, 'seat', 'seats')}…`);
  try {
    const hold = await mutate(`hold:${ctx.id}:${JSON.stringify(body)}`, 'POST', `/v1/shows/${ctx.id}/holds`, body);
    if (ctx.closed) return;
    clearMessage();
    ctx.selected.clear();
    renderSelection(ctx);
    adoptHold(ctx, hold);
  } catch (error) {
    if (ctx.closed) return;
    await holdFailed(ctx, error);
  }
}

async function holdFailed(ctx, error) {
  restingStatus(ctx);
  sayError(error);
  if (error.code === 'seat_unavailable') {
    // The cluster names the taken seats: draw them taken until the next poll says more.
    const taken = (error.details.seats || []).filter((number) => number < ctx.seats.length);
    for (const number of taken) {
      ctx.selected.delete(number);
      ctx.status[number] = 'held';
    }
    if (taken.length) say(`Sorry, ${labelsOf(ctx, taken).join(', ')} ${taken.length === 1 ? 'was' : 'were'} just taken. Please choose other seats.`, 'error', error.code);
    renderSelection(ctx);
    paintAll(ctx);
  } else if (error.code === 'price_version_mismatch') {
    ctx.show = await call('GET', `/v1/shows/${ctx.id}`, { auth: false });
    renderLegend(ctx);
    renderSelection(ctx);
    ctx.painted = [];
    paintAll(ctx);
  } else if (error.code === 'grant_expired' || error.code === 'grant_required') {
    ctx.ticket = null;
    remember(ctx, { ticket_id: null });
    if (ctx.show.admission.enabled) await joinQueue(ctx);
  }
}

/** Makes `hold` (from a hold, an accepted offer or a reload) the one this page follows. */
function adoptHold(ctx, hold) {
  ctx.hold = null;
  ctx.phase = null;
  remember(ctx, { hold_id: hold.hold_id });
  onHold(ctx, hold);
  if (LIVE_HOLD.has(hold.state)) {
    stopStream(ctx, 'hold');
    ctx.streams.hold = watch(`/v1/holds/${hold.hold_id}/events`,
      (type, view) => type === 'hold' && onHold(ctx, view),
      (error) => streamFailed(ctx, error));
  }
}

function stopStream(ctx, name) {
  ctx.streams[name]?.stop();
  delete ctx.streams[name];
}

function streamFailed(ctx, error) {
  if (!ctx.closed) sayError(error);
}

function markMine(ctx, numbers, status) {
  for (const number of numbers) {
    if (status) ctx.mine.set(number, status);
    else ctx.mine.delete(number);
    paintSeat(ctx, number);
  }
}

/**
 * A view of our hold (POST answer, GET, or an event). Views from a lagging replica may arrive
 * out of order: `as_of.log_index` orders them. Returns true when the hold reached an end.
 */
function onHold(ctx, view) {
  if (ctx.closed) return true;
  const previous = ctx.hold;
  if (previous && previous.hold_id === view.hold_id && view.as_of.log_index < previous.as_of.log_index) return false;
  clusterClock.observe(view.as_of);
  // Events carry no labels; keep the ones the POST or GET answer gave.
  ctx.hold = { ...view, seat_labels: view.seat_labels || previous?.seat_labels };
  const labels = (ctx.hold.seat_labels || labelsOf(ctx, view.seats)).join(', ');
  $('held-seats').textContent = `Seats ${labels}: ${money(view.price.amount_minor, view.price.currency)}`;
  let ended = false;
  switch (view.state) {
    case 'held':
      markMine(ctx, view.seats, 'held');
      if (previous?.state === 'processing' || ctx.phase === 'declined') {
        ctx.phase = 'declined';
        stopStream(ctx, 'payment');
        setStatus('declined', 'Your payment was declined. Your seats are still held: you can try paying again.');
      } else if (ctx.phase !== 'paying') {
        // While paying, a "held" view is one from before our checkout: keep saying "paying".
        ctx.phase = 'held';
        setStatus('held', `${plural(view.seats.length, 'seat', 'seats')} held for you. Pay before the timer runs out.`);
      }
      break;
    case 'processing':
      ctx.phase = 'paying';
      setStatus('paying', 'Paying… the payment provider is charging your order.');
      if (view.payment_id) followPayment(ctx, view.payment_id);
      break;
    case 'confirmed':
      ctx.phase = 'booked';
      markMine(ctx, view.seats, 'booked');
      stopStream(ctx, 'payment');
      setStatus('booked', `Booked! ${plural(view.seats.length, 'seat is', 'seats are')} yours.`);
      if (view.booking_id) showBooking(ctx, view.booking_id);
      ended = true;
      break;
    case 'expired':
      ended = holdEnded(ctx, view, 'expired', ctx.phase === 'declined'
        ? 'Your payment was declined and the hold ran out; the seats were released.'
        : 'Your hold expired and the seats were released. You can choose seats again.');
      break;
    case 'cancelled':
      ended = holdEnded(ctx, view, 'cancelled', 'You released the seats.');
      break;
    default:
      break;
  }
  if (ended) stopStream(ctx, 'hold');
  renderCountdowns(ctx);
  updateControls(ctx);
  return ended;
}

function holdEnded(ctx, view, state, text) {
  ctx.phase = state;
  markMine(ctx, view.seats, null);
  stopStream(ctx, 'payment');
  remember(ctx, { hold_id: null });
  setStatus(state, text);
  // With a waiting room, another hold needs another turn.
  if (ctx.show.admission.enabled && ctx.show.status === 'on_sale') {
    ctx.ticket = null;
    remember(ctx, { ticket_id: null });
  }
  return true;
}

async function pay(ctx) {
  const hold = ctx.hold;
  ctx.phase = 'paying';
  setStatus('paying', 'Paying… the payment provider is charging your order.');
  try {
    const checkout = await mutate(`checkout:${hold.hold_id}`, 'POST', `/v1/holds/${hold.hold_id}/checkout`);
    if (ctx.closed) return;
    clearMessage();
    followPayment(ctx, checkout.payment_id);
  } catch (error) {
    if (ctx.closed) return;
    sayError(error);
    if (error.code === 'hold_expired') {
      holdEnded(ctx, hold, 'expired', 'Your hold expired and the seats were released. You can choose seats again.');
      return;
    }
    // The checkout may have started after all (an answer lost on the way): ask the leader.
    ctx.phase = 'held';
    setStatus('held', 'Your seats are still held. You can try paying again.');
    await refreshHold(ctx);
  }
}

/** Reads our hold on its group's leader (linearizable) and shows what it says. */
async function refreshHold(ctx) {
  try {
    const view = await call('GET', `/v1/holds/${ctx.hold.hold_id}`);
    if (!ctx.closed) onHold(ctx, view);
  } catch {
    // The hold's event stream is still open and will tell.
  }
}

/** Follows the payment attempt: its decline is the clearest word of why a hold went back to held. */
function followPayment(ctx, paymentId) {
  if (ctx.streams.payment?.id === paymentId) return;
  stopStream(ctx, 'payment');
  const stream = watch(`/v1/payments/${paymentId}/events`, (type, payment) => {
    if (ctx.closed) return true;
    if (type !== 'payment') return false;
    if (payment.state === 'declined' && liveHold(ctx)) {
      ctx.phase = 'declined';
      setStatus('declined', 'Your payment was declined. Your seats are still held: you can try paying again.');
      updateControls(ctx);
    } else if (payment.state === 'unknown') {
      setStatus('paying', 'Paying… waiting for the payment provider to confirm.');
    } else if (payment.state === 'succeeded' && ctx.phase === 'paying') {
      setStatus('paying', 'Payment received. Confirming your booking…');
    }
    return ['declined', 'succeeded', 'refunded'].includes(payment.state);
  }, () => {
    // The hold's own events still tell the outcome; nothing to add here.
  });
  stream.id = paymentId;
  ctx.streams.payment = stream;
}

async function releaseHold(ctx) {
  const hold = ctx.hold;
  try {
    const view = await mutate(`release:${hold.hold_id}`, 'DELETE', `/v1/holds/${hold.hold_id}`);
    if (!ctx.closed) onHold(ctx, view);
  } catch (error) {
    if (!ctx.closed) sayError(error);
  }
}

async function showBooking(ctx, bookingId) {
  try {
    const booking = await call('GET', `/v1/bookings/${bookingId}`);
    if (ctx.closed) return;
    const text = $('confirmation-text');
    text.dataset.bookingId = booking.booking_id;
    text.textContent = `Booking ${booking.booking_id}: seats ${labelsOf(ctx, booking.seats).join(', ')}, `
      + `${money(booking.price.amount_minor, booking.price.currency)} paid. Enjoy the show!`;
    $('confirmation').hidden = false;
  } catch (error) {
    if (!ctx.closed) sayError(error);
  }
}

// ---- One show: the waiting room -------------------------------------------------------------

async function joinQueue(ctx) {
  setStatus('queued', 'Joining the line…');
  try {
    const ticket = await mutate(`queue:${ctx.id}`, 'POST', `/v1/shows/${ctx.id}/queue`);
    if (!ctx.closed) adoptTicket(ctx, ticket);
  } catch (error) {
    if (ctx.closed) return;
    sayError(error);
    setStatus('error', 'You are not in line. Use "Join the line" to try again.');
  }
}

function adoptTicket(ctx, ticket) {
  ctx.ticket = null;
  remember(ctx, { ticket_id: ticket.ticket_id });
  if (onTicket(ctx, ticket)) return;
  stopStream(ctx, 'ticket');
  ctx.streams.ticket = watch(`/v1/queue/${ticket.ticket_id}/events`,
    (type, view) => type === 'ticket' && onTicket(ctx, view),
    (error) => streamFailed(ctx, error));
}

/** A view of our admission ticket. Returns true once it ended (consumed, left, expired). */
function onTicket(ctx, view) {
  if (ctx.closed) return true;
  if (ctx.ticket && ctx.ticket.ticket_id === view.ticket_id && view.as_of.log_index < ctx.ticket.as_of.log_index) return false;
  clusterClock.observe(view.as_of);
  ctx.ticket = view;
  const queue = $('queue');
  queue.dataset.state = view.state;
  delete queue.dataset.position;
  const quiet = liveHold(ctx); // a live hold's status matters more than the line's
  let ended = false;
  switch (view.state) {
    case 'waiting':
      queue.dataset.position = String(view.position);
      queue.textContent = view.position === 1 ? 'You are next in line.' : `You are number ${view.position} in line.`;
      if (!quiet) setStatus('queued', `You are in the waiting room: number ${view.position} in line.`);
      break;
    case 'granted':
      if (!quiet) setStatus('granted', "It's your turn! Choose your seats and hold them.");
      renderCountdowns(ctx);
      break;
    case 'consumed':
      queue.textContent = 'You were admitted.';
      ended = true;
      break;
    default: // left or expired
      queue.textContent = view.state === 'expired' ? 'Your turn ran out.' : 'You left the line.';
      if (!quiet) setStatus('expired', 'Your turn in the waiting room ran out. Join the line again to buy.');
      ctx.ticket = null;
      remember(ctx, { ticket_id: null });
      ended = true;
  }
  if (ended) stopStream(ctx, 'ticket');
  updateControls(ctx);
  return ended;
}

// ---- One show: the waitlist -----------------------------------------------------------------

async function joinWaitlist(ctx) {
  const quantity = Number($('party-size').value);
  if (!Number.isInteger(quantity) || quantity < 1 || quantity > MAX_SEATS) {
    say(`Ask for 1 to ${MAX_SEATS} seats.`, 'error', 'invalid_argument');
    $('party-size').focus();
    return;
  }
  try {
    const entry = await mutate(`waitlist:${ctx.id}:${quantity}`, 'POST', `/v1/resources/${ctx.id}/waitlist:join`, { quantity });
    if (!ctx.closed) adoptEntry(ctx, entry);
  } catch (error) {
    if (!ctx.closed) sayError(error);
  }
}

function adoptEntry(ctx, entry) {
  ctx.entry = null;
  remember(ctx, { entry_id: entry.entry_id });
  if (onEntry(ctx, entry)) return;
  stopStream(ctx, 'entry');
  ctx.streams.entry = watch(`/v1/waitlist/${entry.entry_id}/events`,
    (type, view) => type === 'entry' && onEntry(ctx, view),
    (error) => streamFailed(ctx, error));
}

/** A view of our waitlist entry and its offer. Returns true once it ended. */
function onEntry(ctx, view) {
  if (ctx.closed) return true;
  if (ctx.entry && ctx.entry.entry_id === view.entry_id && view.as_of.log_index < ctx.entry.as_of.log_index) return false;
  clusterClock.observe(view.as_of);
  ctx.entry = view;
  const position = $('waitlist-position');
  position.dataset.ahead = String(view.ahead);
  let ended = false;
  switch (view.state) {
    case 'waiting':
      position.textContent = view.ahead === 0
        ? `You are first on the waitlist for ${plural(view.quantity, 'seat', 'seats')}.`
        : `You are on the waitlist for ${plural(view.quantity, 'seat', 'seats')}: ${plural(view.ahead, 'party', 'parties')} ahead of you.`;
      setStatus('waitlisted', 'You are on the waitlist. We will offer you seats here as they come back.');
      break;
    case 'offered':
      position.textContent = '';
      if (view.offer?.state === 'open') {
        const labels = labelsOf(ctx, view.offer.seats).join(', ');
        $('offer-text').textContent = `Seats ${labels} are offered to you.`;
        setStatus('offered', `Seats ${labels} are offered to you. Accept them before the offer runs out.`);
        renderCountdowns(ctx);
      }
      break;
    case 'accepted':
      position.textContent = 'You accepted the offer.';
      remember(ctx, { entry_id: null });
      ended = true;
      break;
    default: // declined, expired, left
      position.textContent = { declined: 'You declined the offer.', expired: 'The offer ran out.', left: 'You left the waitlist.' }[view.state] || '';
      setStatus(view.state === 'expired' ? 'expired' : 'idle', position.textContent);
      remember(ctx, { entry_id: null });
      ended = true;
  }
  if (ended) stopStream(ctx, 'entry');
  updateControls(ctx);
  return ended;
}

async function answerOffer(ctx, accept) {
  const offer = ctx.entry.offer;
  const action = accept ? 'accept' : 'decline';
  try {
    const answer = await mutate(`${action}:${offer.offer_id}`, 'POST', `/v1/offers/${offer.offer_id}:${action}`);
    if (ctx.closed) return;
    clearMessage();
    if (accept) {
      stopStream(ctx, 'entry');
      ctx.entry = { ...ctx.entry, state: 'accepted' };
      remember(ctx, { entry_id: null });
      adoptHold(ctx, answer);
    } else {
      onEntry(ctx, { ...ctx.entry, state: 'declined', offer: answer, as_of: answer.as_of });
    }
  } catch (error) {
    if (!ctx.closed) sayError(error);
  }
}

// ---- One show: picking up after a reload ----------------------------------------------------

/** Reads back the hold, ticket and waitlist entry this tab had for the show, if still ours. */
async function resume(ctx) {
  const saved = remembered(ctx);
  // Each is adopted while it still matters, forgotten once over or when the cluster says it is
  // gone or another session's, and kept on a network error (the next visit tries again).
  const pickUp = async (name, path, wanted, adopt) => {
    if (!saved[name]) return;
    try {
      const view = await call('GET', path);
      if (ctx.closed) return;
      if (wanted.includes(view.state)) adopt(ctx, view);
      else remember(ctx, { [name]: null });
    } catch (error) {
      if (!isRetryable(error)) remember(ctx, { [name]: null });
    }
  };
  await pickUp('hold_id', `/v1/holds/${saved.hold_id}`, ['held', 'processing', 'confirmed'], adoptHold);
  await pickUp('ticket_id', `/v1/queue/${saved.ticket_id}`, ['waiting', 'granted'], adoptTicket);
  await pickUp('entry_id', `/v1/waitlist/${saved.entry_id}`, ['waiting', 'offered'], adoptEntry);
}

// ---- Wiring -------------------------------------------------------------------------------------

/** A button handler acting on the open show. */
function onShow(handler) {
  return () => {
    const ctx = current;
    if (ctx && ctx.show) act(ctx, () => handler(ctx));
  };
}

function init() {
  $('search-form').addEventListener('submit', onSearchSubmit);
  // After the form's own reset has cleared the fields: browse everything again.
  $('search-form').addEventListener('reset', () => setTimeout(() => navigate('#/')));
  $('locate').addEventListener('click', onLocate);
  $('more').addEventListener('click', () => {
    if (search.cursor) runSearch(search.params, search.cursor);
  });
  $('seatmap').addEventListener('click', onMapClick);
  $('seatmap').addEventListener('keydown', onMapKey);
  $('clear-selection').addEventListener('click', () => {
    const ctx = current;
    if (!ctx) return;
    const numbers = [...ctx.selected];
    ctx.selected.clear();
    for (const number of numbers) paintSeat(ctx, number);
    renderSelection(ctx);
    updateControls(ctx);
  });
  $('hold').addEventListener('click', onShow(holdSeats));
  $('pay').addEventListener('click', onShow(pay));
  $('release').addEventListener('click', onShow(releaseHold));
  $('join-queue').addEventListener('click', onShow(joinQueue));
  $('join-waitlist').addEventListener('click', onShow(joinWaitlist));
  $('accept-offer').addEventListener('click', onShow((ctx) => answerOffer(ctx, true)));
  $('decline-offer').addEventListener('click', onShow((ctx) => answerOffer(ctx, false)));
  window.addEventListener('hashchange', route);
  route();
}

init();

// voltro schedules dashboard — a thin client over the inspect API, vanilla JS, no build step.
//
// The page polls GET <api> (one page of schedules, PAGE_SIZE at a time, filtered by the search
// box's name prefix and the last-outcome select, paged by the listing's nextCursor) and
// GET <api>/runs?name=… (the timelines that are open) every few seconds with the session
// cookie — never every schedule at once: at 100,000 schedules a poll stays one page, and updates the DOM in place, keyed by
// schedule name and run id: what is expanded, which error is open, focus and scroll all
// survive a refresh. Countdowns tick every second against the server's clock (the listing's
// `now`), so a browser whose clock is off still counts down to the real firing.
//
// Every write is a call of the inspect API with the session cookie — Run now and pause are
// POSTs, the run-time schedule form PUTs and DELETEs /_voltro/inspect/schedules/{name} — so the
// page checks nothing the server does not: it shows the server's refusal next to the field the
// refusal names.
(() => {
  "use strict";

  const root = document.getElementById("app");
  if (!root) return;
  const API = root.dataset.api;
  // The fleet-wide routes sit beside the schedules': /_voltro/inspect/resume-all.
  const INSPECT = API.slice(0, API.lastIndexOf("/"));
  const OPERATOR = root.dataset.role === "operator";
  const REFRESH_MS = 4000;
  const RUNS_PAGE = 10; // runs shown per timeline; "Show older runs" adds RUNS_MORE
  const RUNS_MORE = 20;
  const RUNS_MAX = 200;
  const STORE_KEY = "voltro.dashboard.expanded";
  const PAGE_SIZE = 50; // schedules per page
  const SEARCH_DELAY_MS = 250; // typing settles before the listing is asked

  const $ = (id) => document.getElementById(id);
  const list = $("schedules");
  const banner = $("status");
  const freshness = $("freshness");

  const state = {
    offsetMs: 0, // server clock − browser clock
    expanded: new Set(readStored()),
    openErrors: new Set(), // run ids whose error <details> is open
    runs: new Map(), // schedule name → runs (newest first), for the expanded ones
    limits: new Map(), // schedule name → how many runs its timeline shows
    schedules: new Map(), // name → listing entry
    lastOk: null,
    failing: false,
    timer: null,
    signedOut: false,
    // paging: cursors[i] is where page i starts ("" the first); the filters reset it
    cursors: [""],
    page: 0,
    next: null, // the current page's nextCursor
    prefix: "",
    status: "",
  };

  function readStored() {
    try {
      const value = JSON.parse(sessionStorage.getItem(STORE_KEY) || "[]");
      return Array.isArray(value) ? value : [];
    } catch (_) {
      return [];
    }
  }
  function storeExpanded() {
    try {
      sessionStorage.setItem(STORE_KEY, JSON.stringify([...state.expanded]));
    } catch (_) {
      /* private mode: the state just does not survive a reload */
    }
  }

  // ---- small DOM helpers ---------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children) if (child) node.append(child);
    return node;
  }
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }
  function setClass(node, name) {
    if (node.className !== name) node.className = name;
  }

  // Reconcile container's children with items, reusing the element of each key, so nothing
  // the user is looking at (focus, an open <details>, the scroll position) is rebuilt.
  function sync(container, items, keyOf, make, update) {
    const existing = new Map();
    for (const child of container.children) existing.set(child.dataset.key, child);
    let previous = null;
    for (const item of items) {
      const key = keyOf(item);
      let node = existing.get(key);
      if (!node) {
        node = make(item);
        node.dataset.key = key;
      }
      existing.delete(key);
      update(node, item);
      const wanted = previous ? previous.nextSibling : container.firstChild;
      if (node !== wanted) container.insertBefore(node, wanted);
      previous = node;
    }
    for (const node of existing.values()) node.remove();
  }

  // Keep what the reader looks at where it is on screen while the page updates above it (a
  // new run at the top of a timeline, a card growing). Done here rather than left to the
  // browser's scroll anchoring, which not every browser has and which picks its own anchor.
  function keepView(update) {
    let anchor = null;
    let before = 0;
    if (window.scrollY > 0) {
      const bar = document.querySelector(".topbar");
      const barBottom = bar && getComputedStyle(bar).position === "sticky" ? bar.getBoundingClientRect().bottom : 0;
      for (const node of list.querySelectorAll(".card-head, .facts, .run, .timeline > h3")) {
        const top = node.getBoundingClientRect().top;
        if (top >= barBottom) {
          anchor = node;
          before = top;
          break;
        }
      }
    }
    update();
    if (anchor && anchor.isConnected) {
      const delta = anchor.getBoundingClientRect().top - before;
      if (Math.abs(delta) >= 1) window.scrollBy(0, delta);
    }
  }

  // ---- time ----------------------------------------------------------------------------
  const serverNow = () => Date.now() + state.offsetMs;

  function span(ms) {
    const total = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(total / 86400);
    const h = Math.floor((total % 86400) / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = total % 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  }
  function until(iso) {
    const ms = Date.parse(iso) - serverNow();
    return ms <= 0 ? "due now" : `in ${span(ms + 999)}`; // rounded up: "in 1s", never "in 0s"
  }
  function ago(iso) {
    const ms = serverNow() - Date.parse(iso);
    return ms < 1000 ? "just now" : `${span(ms)} ago`;
  }
  function duration(ms) {
    if (ms < 1000) return `${ms} ms`;
    if (ms < 60000) return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
    return span(ms);
  }
  function setting(ms) {
    // A configured duration, as people write them: "30 min", "2 h", "90 s".
    const units = [[3600000, "h"], [60000, "min"], [1000, "s"]];
    for (const [size, unit] of units) if (ms >= size && ms % size === 0) return `${ms / size} ${unit}`;
    return duration(ms);
  }
  function inZone(iso, zone, seconds) {
    const options = {
      weekday: "short", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
      timeZoneName: "short", hourCycle: "h23",
    };
    if (seconds) options.second = "2-digit";
    try {
      return new Intl.DateTimeFormat(undefined, { ...options, timeZone: zone }).format(new Date(iso));
    } catch (_) {
      return new Date(iso).toISOString();
    }
  }
  function local(iso) {
    return new Intl.DateTimeFormat(undefined, {
      month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit",
      hourCycle: "h23",
    }).format(new Date(iso));
  }

  // ---- HTTP ----------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, detail, body) {
      super(detail);
      this.status = status;
      this.code = (body && body.code) || null; // the package's stable error code
      this.field = (body && body.field) || null; // 422 invalid_schedule: the body's key
    }
  }
  function api(path, options) {
    return call(API + path, options);
  }
  async function call(url, options) {
    const response = await fetch(url, {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
      ...options,
    });
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      /* not JSON: reported by status below */
    }
    if (!response.ok) {
      const detail = (body && body.detail) || `${response.status} ${response.statusText}`;
      throw new ApiError(response.status, typeof detail === "string" ? detail : JSON.stringify(detail), body);
    }
    return body;
  }

  let sayTimer = null;
  function say(message, isError) {
    // Confirmations fade after a while; errors stay until the next success clears them.
    clearTimeout(sayTimer);
    if (message && !isError) sayTimer = setTimeout(() => say(""), 10000);
    banner.classList.toggle("is-error", Boolean(isError));
    banner.replaceChildren();
    if (!message) return;
    if (message instanceof Node) banner.append(message);
    else banner.textContent = message;
  }
  function sessionEnded() {
    state.signedOut = true;
    say(
      el("span", {},
        "Your session ended (the token was rotated, or the app restarted with other tokens). ",
        el("a", { href: window.location.pathname, text: "Sign in again" }), "."),
      true,
    );
  }

  // ---- the schedules listing -----------------------------------------------------------
  function pauseOf(s) {
    // The listing: {"paused": true, "pause": {"pausedAt", "pausedBy", "reason",
    // "everySchedule", "until"}} — everySchedule: the fleet-wide pause holds it.
    if (!s.paused) return null;
    const p = s.pause || {};
    return { by: p.pausedBy, at: p.pausedAt, reason: p.reason, all: Boolean(p.everySchedule), until: p.until };
  }

  // ---- every schedule paused at once: the banner ---------------------------------------
  const pauseAllBox = $("pause-all");
  function showPauseAll(p) {
    // The listing's pauseAll: {"pausedAt", "pausedBy", "reason", "until"}, or null.
    pauseAllBox.hidden = !p;
    if (!p) return;
    let text = `Every schedule is paused by the ${p.pausedBy} token since ${local(p.pausedAt)}`;
    if (p.reason) text += ` — “${p.reason}”`;
    text += p.until ? ` — until ${local(p.until)} (${until(p.until)}), then resumes itself` : " — until resumed";
    setText($("pause-all-text"), `${text}.`);
    pauseAllBox.title = "Nothing inside the window is replayed; schedules paused on their own stay paused.";
  }
  async function resumeAll() {
    const button = $("resume-all");
    button.disabled = true;
    try {
      await call(`${INSPECT}/resume-all`, { method: "POST" });
      say("Every schedule resumed: each fires from its next occurrence (those paused on their own stay paused).");
      await refresh();
    } catch (error) {
      report(error, "Could not resume every schedule");
    } finally {
      button.disabled = false;
    }
  }
  const hasSeconds = (cron) => cron.trim().split(/\s+/).length === 6;

  let cardSeq = 0;
  function makeCard(s) {
    const id = `s${++cardSeq}`;
    const r = {};
    r.chevron = el("span", { class: "chevron", "aria-hidden": "true", text: "▸" });
    r.name = el("span", { class: "sched-name" });
    r.expander = el("button", {
      type: "button", class: "expander", "aria-expanded": "false", "aria-controls": `${id}-runs`,
      onclick: () => toggle(s.name),
    }, r.chevron, r.name);
    r.trigger = el("span", { class: "badge", title: "trigger: who drives the clock" });
    r.paused = el("span", { class: "badge badge-paused", hidden: true, text: "paused" });
    r.last = el("span", { class: "badge status", hidden: true });
    r.runtime = el("span", { class: "badge badge-runtime", hidden: true, title: "written at run time (the form or PUT), not declared in code", text: "runtime" });
    r.desc = el("p", { class: "desc" });
    const head = el("div", {}, el("div", { class: "title-line" }, r.expander, r.trigger, r.runtime, r.paused, r.last), r.desc);

    r.actions = el("div", { class: "actions" });
    if (OPERATOR) {
      r.runNow = el("button", { type: "button", class: "btn btn-primary", "data-action": "run-now", onclick: () => askRunNow(s.name) }, "Run now");
      r.confirmText = el("span", {});
      r.confirmYes = el("button", { type: "button", class: "btn btn-danger", "data-action": "confirm-run", onclick: () => runNow(s.name) }, "Run it");
      r.confirmNo = el("button", { type: "button", class: "btn", onclick: () => cancelRunNow(s.name) }, "Cancel");
      r.confirm = el("div", { class: "confirm", role: "group", "aria-label": "Confirm Run now", hidden: true }, r.confirmText, r.confirmYes, r.confirmNo);
      r.pause = el("button", { type: "button", class: "btn", "data-action": "pause", onclick: () => togglePause(s.name) }, "Pause");
      r.actions.append(r.runNow, r.confirm, r.pause);
      // Only a run-time schedule is the page's to edit or delete: a declared one is the code's.
      r.edit = el("button", { type: "button", class: "btn", "data-action": "edit", hidden: true, onclick: () => openEditor(s.name) }, "Edit");
      r.remove = el("button", { type: "button", class: "btn", "data-action": "delete", hidden: true, onclick: () => askDelete(s.name) }, "Delete");
      r.deleteText = el("span", {});
      r.deleteYes = el("button", { type: "button", class: "btn btn-danger", "data-action": "confirm-delete", onclick: () => deleteSchedule(s.name) }, "Delete it");
      r.deleteNo = el("button", { type: "button", class: "btn", onclick: () => cancelDelete(s.name) }, "Cancel");
      r.deleteConfirm = el("div", { class: "confirm", role: "group", "aria-label": "Confirm Delete", hidden: true }, r.deleteText, r.deleteYes, r.deleteNo);
      r.actions.append(r.edit, r.remove, r.deleteConfirm);
    }

    const fact = (label, node) => el("div", {}, el("dt", { text: label }), el("dd", {}, node));
    r.countdown = el("span", { class: "countdown" });
    r.nextAbs = el("span", { class: "when" });
    r.nextLabel = el("dt", { text: "next firing" });
    r.cron = el("code", {});
    r.zone = el("span", {});
    r.overlap = el("span", {});
    r.backfill = el("span", {});
    r.maxRuntime = el("span", {});
    r.source = el("span", { "data-source": "" });
    const next = el("div", { class: "fact-next" }, r.nextLabel, el("dd", {}, r.countdown, r.nextAbs));
    r.facts = el("dl", { class: "facts" }, next, fact("cron", r.cron), fact("zone", r.zone),
      fact("overlap", r.overlap), fact("backfill", r.backfill), fact("max runtime", r.maxRuntime),
      fact("source", r.source));
    r.pausedNote = el("p", { class: "paused-note", hidden: true });

    r.runsEmpty = el("p", { class: "empty", hidden: true });
    r.runsList = el("ol", { class: "runs" });
    r.columns = el("div", { class: "run run-cols", "aria-hidden": "true" },
      el("span", { text: "status" }), el("span", { text: "fired" }), el("span", { text: "took" }),
      el("span", { text: "replica" }), el("span", { text: "trigger · coordination" }));
    r.more = el("button", { type: "button", class: "btn btn-quiet more", hidden: true, onclick: () => showOlder(s.name) }, "Show older runs");
    r.timeline = el("section", { class: "timeline", id: `${id}-runs`, "aria-label": `Runs of ${s.name}`, hidden: true },
      el("h3", { text: "Recent runs, newest first" }), r.runsEmpty, r.columns, r.runsList, r.more);

    const card = el("li", { class: "card", "data-schedule": s.name },
      el("div", { class: "card-head" }, head, r.actions), r.facts, r.pausedNote, r.timeline);
    card.refs = r;
    return card;
  }

  function updateCard(card, s) {
    const r = card.refs;
    const pause = pauseOf(s);
    const open = state.expanded.has(s.name);
    setClass(card, pause ? "card is-paused" : "card");
    setText(r.name, s.name);
    r.expander.setAttribute("aria-expanded", String(open));
    setText(r.trigger, s.trigger);
    setClass(r.trigger, `badge badge-trigger-${s.trigger}`);
    r.trigger.setAttribute("data-trigger", s.trigger);
    r.paused.hidden = !pause;
    // The newest run of any trigger: a Run now that failed is what the reader must see, even
    // while the last clock-driven run succeeded (lastRun, kept for older servers).
    const last = s.newestRun || s.lastRun;
    if (last) {
      r.last.hidden = false;
      setText(r.last, `last ${last.status}`);
      setClass(r.last, `badge status status-${last.status}`);
      r.last.dataset.runId = last.runId;
      r.last.dataset.trigger = last.trigger;
      const how = last.trigger === "manual" ? "manual run" : `${last.trigger} run`;
      r.last.title = `last run (${how}): ${last.status}, slot ${last.scheduledAt}`;
    } else r.last.hidden = true;
    const runtime = s.source === "runtime";
    r.runtime.hidden = !runtime;
    let desc = s.description || "";
    if (runtime && !desc) {
      // A run-time schedule has no description: say what it runs instead.
      const args = s.args && Object.keys(s.args).length ? ` with args ${JSON.stringify(s.args)}` : "";
      desc = `Runs handler ${s.handler}${args}.`;
    }
    setText(r.desc, desc);
    r.desc.hidden = !desc;

    setText(r.nextLabel, s.trigger === "external" ? "next occurrence" : "next firing");
    r.countdown.dataset.at = s.nextFiring || "";
    r.countdown.dataset.none = pause ? "none while paused" : "—";
    r.nextAbs.dataset.at = s.nextFiring || "";
    setText(r.nextAbs, s.nextFiring ? inZone(s.nextFiring, s.timezone, hasSeconds(s.cron)) : "");
    setText(r.cron, s.cron);
    setText(r.zone, s.timezone);
    setText(r.overlap, s.onOverlap);
    setText(r.backfill, s.backfill);
    setText(r.maxRuntime, s.maxRuntimeMs == null ? "none" : setting(s.maxRuntimeMs));
    setText(r.source, s.source || "code");
    r.source.dataset.source = s.source || "code";

    r.pausedNote.hidden = !pause;
    if (pause) {
      const parts = ["Paused"];
      if (pause.by) parts.push(`by the ${pause.by} token`);
      if (pause.at) parts.push(`${ago(pause.at)} (${local(pause.at)})`);
      let note = parts.join(" ");
      if (pause.reason) note += ` — “${pause.reason}”`;
      setText(r.pausedNote, pause.all
        ? `${note.replace("Paused", "Paused with every schedule")}. It fires nothing until they are resumed (the banner above).`
        : `${note}. It fires nothing until resumed; resuming starts from the next occurrence.`);
    }
    if (OPERATOR) {
      // A paused schedule refuses Run now (409): say why instead of offering it.
      r.runNow.disabled = Boolean(pause);
      r.runNow.title = pause ? "Paused: resume it to run it" : "";
      setText(r.pause, pause ? "Resume" : "Pause");
      r.pause.dataset.action = pause ? "resume" : "pause";
      // Held by the fleet-wide pause: its own Resume would change nothing — the banner's does.
      r.pause.disabled = Boolean(pause && pause.all);
      r.pause.title = pause && pause.all ? "Paused with every schedule: Resume all in the banner" : "";
      setText(r.confirmText, `Run ${s.name} now? It runs even if a run is in flight.`);
      const asking = !r.deleteConfirm.hidden;
      r.edit.hidden = !runtime || asking;
      r.remove.hidden = !runtime || asking;
      if (!runtime) r.deleteConfirm.hidden = true;
      setText(r.deleteText, `Delete ${s.name}? Nothing new fires; its runs stay in the history.`);
    }

    r.timeline.hidden = !open;
    if (open) updateRuns(card, s);
  }

  // ---- a schedule's run timeline -------------------------------------------------------
  function makeRun(run) {
    const r = {};
    r.status = el("span", { class: "badge status" });
    r.attempt = el("span", { class: "run-attempt" });
    r.rel = el("span", { class: "rel" });
    r.abs = el("time", { class: "run-abs" });
    r.duration = el("span", { class: "run-meta" });
    r.replica = el("span", { class: "run-meta" });
    r.how = el("span", { class: "run-meta run-how" });
    const label = (text) => el("span", { class: "run-label", text: `${text} ` });
    const node = el("li", { class: "run", "data-run-id": run.runId },
      el("span", {}, r.status, r.attempt),
      el("span", { class: "run-time" }, r.rel, r.abs),
      el("span", {}, label("took"), r.duration),
      el("span", {}, label("replica"), r.replica),
      el("span", {}, label("trigger · coordination"), r.how));
    node.refs = r;
    return node;
  }

  function updateRun(node, run) {
    const r = node.refs;
    setClass(r.status, `badge status status-${run.status}`);
    setText(r.status, run.status);
    r.status.dataset.status = run.status;
    // Retries within the slot (RetryPolicy): one row, its attempt counting up.
    const attempt = run.attempt || 1;
    r.attempt.hidden = attempt < 2 && !run.retryAt;
    setText(r.attempt, run.retryAt
      ? `attempt ${attempt} failed · retry ${local(run.retryAt)}`
      : `attempt ${attempt}`);
    r.attempt.title = run.retryAt
      ? `attempt ${attempt + 1} is due at ${run.retryAt} (UTC)`
      : `${attempt} attempts of this slot`;
    const at = run.firedAt || run.scheduledAt;
    r.rel.dataset.rel = at;
    r.rel.dataset.prefix = run.firedAt ? "fired " : "slot ";
    setText(r.rel, r.rel.dataset.prefix + ago(at));
    r.abs.setAttribute("datetime", at);
    r.abs.title = `slot ${run.scheduledAt}${run.firedAt ? `, fired ${run.firedAt}` : ""} (UTC)`;
    setText(r.abs, local(at));
    if (run.durationMs != null) {
      delete r.duration.dataset.since;
      setText(r.duration, duration(run.durationMs));
    } else if (run.status === "running" && run.firedAt) {
      r.duration.dataset.since = run.firedAt; // ticks with the clock
      setText(r.duration, `${span(serverNow() - Date.parse(run.firedAt))} so far`);
    } else {
      delete r.duration.dataset.since;
      setText(r.duration, "—");
    }
    setText(r.replica, run.replicaId || "—");
    const how = [run.trigger];
    if (run.coordinationOutcome) how.push(run.coordinationOutcome);
    setText(r.how, how.join(" · "));
    r.how.title = "trigger · coordination outcome (why this replica ran it)";

    const hasError = Boolean(run.error || run.errorTag || run.traceback);
    if (hasError && !r.error) {
      r.summary = el("summary", {});
      r.message = el("pre", {});
      r.error = el("details", { class: "run-error" }, r.summary, r.message);
      r.error.addEventListener("toggle", () => {
        if (r.error.open) state.openErrors.add(run.runId);
        else state.openErrors.delete(run.runId);
      });
      node.append(r.error);
    }
    if (r.error) {
      r.error.hidden = !hasError;
      const tag = run.errorTag || "error";
      let first = (run.error || "").split("\n")[0];
      if (first.length > 90) first = `${first.slice(0, 88)}…`;
      setText(r.summary, first ? `${tag}: ${first}` : tag);
      const text = [run.error, run.traceback].filter(Boolean).join("\n\n");
      setText(r.message, text || "(no message recorded)");
      r.error.open = state.openErrors.has(run.runId);
    }
  }

  function updateRuns(card, s) {
    const r = card.refs;
    const runs = state.runs.get(s.name);
    if (!runs) {
      r.runsEmpty.hidden = false;
      r.runsEmpty.dataset.key = "";
      setText(r.runsEmpty, "Loading runs…");
      return;
    }
    r.runsEmpty.hidden = runs.length > 0;
    r.columns.hidden = runs.length === 0;
    const limit = state.limits.get(s.name) || RUNS_PAGE;
    r.more.hidden = runs.length < limit || limit >= RUNS_MAX;
    if (!runs.length) {
      const pause = pauseOf(s);
      let before = "No runs yet.";
      let next = null;
      let after = "";
      if (pause) before = "No runs yet — paused; resume it to fire again.";
      else if (s.nextFiring) {
        before = s.trigger === "external"
          ? "No runs yet — the platform scheduler triggers it; next occurrence "
          : "No runs yet — next firing ";
        next = el("span", { class: "countdown", "data-at": s.nextFiring, text: until(s.nextFiring) });
        after = ".";
      }
      if (OPERATOR && !pause) after += " Run now fires it at once.";
      const key = `${before}|${s.nextFiring}|${after}`;
      if (r.runsEmpty.dataset.key !== key) {
        r.runsEmpty.dataset.key = key;
        r.runsEmpty.replaceChildren(before, ...(next ? [next] : []), after);
      }
    }
    sync(r.runsList, runs, (run) => run.runId, makeRun, updateRun);
  }

  // ---- actions -------------------------------------------------------------------------
  function card(name) {
    for (const child of list.children) if (child.dataset.key === name) return child;
    return null;
  }

  function toggle(name) {
    if (state.expanded.has(name)) state.expanded.delete(name);
    else state.expanded.add(name);
    storeExpanded();
    const node = card(name);
    const s = state.schedules.get(name);
    if (node && s) updateCard(node, s);
    if (state.expanded.has(name)) loadRuns(name).then(() => rerender(name));
  }

  function rerender(name) {
    const node = card(name);
    const s = state.schedules.get(name);
    if (node && s) keepView(() => updateCard(node, s));
  }

  async function showOlder(name) {
    state.limits.set(name, Math.min(RUNS_MAX, (state.limits.get(name) || RUNS_PAGE) + RUNS_MORE));
    try {
      await loadRuns(name);
      rerender(name);
    } catch (error) {
      report(error, `Could not load older runs of ${name}`);
    }
  }

  function askRunNow(name) {
    const r = card(name).refs;
    r.runNow.hidden = true;
    r.confirm.hidden = false;
    r.confirmYes.focus();
  }
  function cancelRunNow(name) {
    const r = card(name).refs;
    r.confirm.hidden = true;
    r.runNow.hidden = false;
    r.runNow.focus();
  }

  async function runNow(name) {
    const r = card(name).refs;
    r.confirmYes.disabled = true;
    try {
      const answer = await api(`/${encodeURIComponent(name)}/fire`, { method: "POST" });
      say(`Run now: ${name} started (run ${answer.runId}).`);
      if (!state.expanded.has(name)) {
        state.expanded.add(name);
        storeExpanded();
      }
      await refresh();
    } catch (error) {
      report(error, `Run now of ${name} failed`);
    } finally {
      r.confirmYes.disabled = false;
      r.confirm.hidden = true;
      r.runNow.hidden = false;
      r.runNow.focus();
    }
  }

  async function togglePause(name) {
    const s = state.schedules.get(name);
    const r = card(name).refs;
    const verb = pauseOf(s) ? "resume" : "pause";
    r.pause.disabled = true;
    try {
      await api(`/${encodeURIComponent(name)}/${verb}`, {
        method: "POST",
        headers: { Accept: "application/json", "Content-Type": "application/json" },
        body: "{}",
      });
      say(verb === "pause" ? `${name} is paused: it fires nothing until resumed.` : `${name} resumed: it fires from its next occurrence.`);
      await refresh();
    } catch (error) {
      report(error, `Could not ${verb} ${name}`);
    } finally {
      r.pause.disabled = false;
    }
  }

  function askDelete(name) {
    const r = card(name).refs;
    r.edit.hidden = true;
    r.remove.hidden = true;
    r.deleteConfirm.hidden = false;
    r.deleteNo.focus();
  }
  function cancelDelete(name) {
    const r = card(name).refs;
    r.deleteConfirm.hidden = true;
    r.edit.hidden = false;
    r.remove.hidden = false;
    r.remove.focus();
  }

  async function deleteSchedule(name) {
    const node = card(name);
    const r = node.refs;
    r.deleteYes.disabled = true;
    try {
      await api(`/${encodeURIComponent(name)}`, { method: "DELETE" });
      say(`${name} is deleted: nothing new fires on any replica; its runs stay in the ledger.`);
      if (editor.name === name) closeEditor();
      state.expanded.delete(name);
      storeExpanded();
      await refresh();
    } catch (error) {
      report(error, `Could not delete ${name}`);
      if (node.isConnected) cancelDelete(name);
    } finally {
      r.deleteYes.disabled = false;
    }
  }

  // ---- the run-time schedule form (operator) --------------------------------------------
  // One form for New and Edit. It PUTs /_voltro/inspect/schedules/{name} — the route any
  // client calls, which checks every field — and shows a refusal next to the field it names.
  const form = $("schedule-form");
  const editor = {
    section: $("editor"),
    title: $("editor-title"),
    save: $("save-schedule"),
    formError: $("form-error"),
    opener: null, // the button that opened the form: focus goes back to it
    name: null, // the schedule being edited (null: a new one)
  };
  const FIELDS = ["name", "cron", "timezone", "handler", "onOverlap", "backfill", "maxRuntimeMs", "args"];
  const input = (field) => $(`f-${field}`);

  function clearErrors() {
    editor.formError.hidden = true;
    editor.formError.textContent = "";
    for (const field of FIELDS) {
      const note = $(`f-${field}-error`);
      note.hidden = true;
      note.textContent = "";
      input(field).removeAttribute("aria-invalid");
    }
  }
  function showError(field, message) {
    const note = field && $(`f-${field}-error`);
    if (!note) {
      editor.formError.textContent = message;
      editor.formError.hidden = false;
      return;
    }
    note.textContent = message;
    note.hidden = false;
    input(field).setAttribute("aria-invalid", "true");
    input(field).focus();
  }

  function fillZones() {
    const list = $("zones");
    if (!list || list.children.length || !Intl.supportedValuesOf) return;
    try {
      for (const zone of Intl.supportedValuesOf("timeZone")) list.append(el("option", { value: zone }));
    } catch (_) {
      /* an older browser: the field still takes any zone the server knows */
    }
  }

  function openEditor(name) {
    const s = name ? state.schedules.get(name) : null;
    if (!form || (name && !s)) return;
    editor.name = name;
    editor.opener = document.activeElement;
    clearErrors();
    form.reset();
    fillZones();
    const nameField = input("name");
    if (s) {
      setText(editor.title, `Edit ${name}`);
      setText(editor.save, "Save");
      nameField.value = name;
      nameField.readOnly = true; // the name is the key: a rename is a new schedule
      input("cron").value = s.cron;
      input("timezone").value = s.timezone;
      const handler = input("handler");
      if (![...handler.options].some((o) => o.value === s.handler)) {
        handler.append(el("option", { value: s.handler, text: s.handler }));
      }
      handler.value = s.handler;
      input("onOverlap").value = s.onOverlap;
      input("backfill").value = s.backfill;
      input("maxRuntimeMs").value = s.maxRuntimeMs == null ? "" : String(s.maxRuntimeMs);
      input("args").value = s.args && Object.keys(s.args).length ? JSON.stringify(s.args, null, 2) : "";
    } else {
      setText(editor.title, "New schedule");
      setText(editor.save, "Create");
      nameField.readOnly = false;
    }
    editor.section.hidden = false;
    $("new-schedule").setAttribute("aria-expanded", "true");
    editor.section.scrollIntoView({ block: "start" });
    (s ? input("cron") : nameField).focus();
  }

  function closeEditor() {
    editor.section.hidden = true;
    editor.name = null;
    $("new-schedule").setAttribute("aria-expanded", "false");
    const back = editor.opener;
    editor.opener = null;
    if (back && back.isConnected) back.focus();
  }

  // The PUT body from the form, or null after showing what is wrong with what cannot be sent
  // as JSON at all. Everything else — the cron, the zone, the numbers — is the server's to judge.
  function formBody() {
    const body = {
      cron: input("cron").value.trim(),
      timezone: input("timezone").value.trim(),
      handler: input("handler").value,
      onOverlap: input("onOverlap").value,
      backfill: input("backfill").value,
    };
    const max = input("maxRuntimeMs").value.trim();
    if (max) body.maxRuntimeMs = /^\d+$/.test(max) ? Number(max) : max;
    const args = input("args").value.trim();
    if (args) {
      try {
        body.args = JSON.parse(args);
      } catch (error) {
        showError("args", `Not JSON (${error.message}) — write an object such as {"tenant": "acme"}, or leave it empty.`);
        return null;
      }
    }
    return body;
  }

  async function saveSchedule(event) {
    event.preventDefault();
    clearErrors();
    const name = editor.name || input("name").value.trim();
    if (!name) {
      showError("name", "Enter a name, e.g. report.acme.");
      return;
    }
    if (name.includes("/") || name === "." || name === "..") {
      // Not the server's rule repeated: such a name cannot be a URL segment, so the PUT would
      // reach another route (or none) and never be judged.
      showError("name", `"${name}" cannot be a schedule's name — use letters, digits, "_", "-", "." or ":", starting with a letter or digit.`);
      return;
    }
    let existing = state.schedules.get(name);
    if (!editor.name && !existing) {
      // The page holds one page of schedules: ask the server whether the name is taken.
      try {
        existing = await api(`/${encodeURIComponent(name)}`);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 404)) {
          report(error, `Checking ${name}`);
          return;
        }
      }
    }
    if (!editor.name && existing && existing.source === "runtime") {
      // A PUT would replace it: a New form must not overwrite a schedule unseen.
      showError("name", `${name} exists already — use its Edit button to change it.`);
      return;
    }
    const body = formBody();
    if (!body) return;
    editor.save.disabled = true;
    try {
      const answer = await api(`/${encodeURIComponent(name)}`, {
        method: "PUT",
        headers: { Accept: "application/json", "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
      const what = editor.name ? "saved: the new definition is in force from now" : "created";
      say(`${name} ${what} (next firing ${answer.nextFiring ? until(answer.nextFiring) : "none"}).`);
      closeEditor();
      await refresh();
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) sessionEnded();
      else if (error instanceof ApiError && error.code === "declared_in_code") showError("name", error.message);
      else if (error instanceof ApiError && error.field) showError(error.field.split(".")[0], error.message);
      else showError(null, `Could not save ${name}: ${error.message}`);
    } finally {
      editor.save.disabled = false;
    }
  }

  if (OPERATOR && form) {
    form.addEventListener("submit", saveSchedule);
    $("new-schedule").addEventListener("click", () => openEditor(null));
    $("cancel-schedule").addEventListener("click", closeEditor);
    editor.section.addEventListener("keydown", (event) => {
      if (event.key === "Escape") closeEditor();
    });
  }

  function report(error, what) {
    if (error instanceof ApiError && error.status === 401) sessionEnded();
    else say(`${what}: ${error.message}`, true);
  }

  // ---- polling -------------------------------------------------------------------------
  async function loadRuns(name) {
    const limit = state.limits.get(name) || RUNS_PAGE;
    const body = await api(`/runs?name=${encodeURIComponent(name)}&limit=${limit}`);
    state.runs.set(name, body.runs);
  }

  // One refresh at a time; a call while one is in flight runs once more right after it.
  let inFlight = null;
  let again = false;
  let lastStart = 0;
  function refresh() {
    if (inFlight) {
      again = true;
      return inFlight;
    }
    inFlight = load().finally(() => {
      inFlight = null;
      if (again) {
        again = false;
        refresh();
      }
    });
    return inFlight;
  }

  async function load() {
    if (state.signedOut) return;
    clearTimeout(state.timer);
    lastStart = Date.now();
    try {
      const sent = Date.now();
      const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
      if (state.prefix) query.set("prefix", state.prefix);
      if (state.status) query.set("status", state.status);
      if (state.cursors[state.page]) query.set("cursor", state.cursors[state.page]);
      const body = await api(`?${query}`);
      const received = Date.now();
      state.offsetMs = Date.parse(body.now) - (sent + received) / 2;
      setText($("coordination"), body.coordination);
      setText($("replica"), body.replicaId);
      state.schedules = new Map(body.schedules.map((s) => [s.name, s]));
      showPauseAll(body.pauseAll);
      await Promise.all(
        [...state.expanded].filter((n) => state.schedules.has(n)).map((n) => loadRuns(n)),
      );
      keepView(() => sync(list, body.schedules, (s) => s.name, makeCard, updateCard));
      const filtered = Boolean(state.prefix || state.status);
      $("empty").hidden = body.schedules.length > 0 || filtered || state.page > 0;
      $("no-match").hidden = body.schedules.length > 0 || !(filtered || state.page > 0);
      showPager(body.nextCursor || null);
      state.lastOk = Date.now();
      root.dataset.refreshes = String(Number(root.dataset.refreshes || 0) + 1); // for tests
      if (state.failing) {
        state.failing = false;
        say("");
      }
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        sessionEnded();
        return;
      }
      state.failing = true;
      say(`Could not refresh: ${error.message}. Retrying every ${REFRESH_MS / 1000} s; what you see may be stale.`, true);
    }
    tick();
    state.timer = setTimeout(refresh, REFRESH_MS);
  }

  function showPager(next) {
    state.next = next;
    $("pager").hidden = state.page === 0 && !next;
    $("prev-page").disabled = state.page === 0;
    $("next-page").disabled = !next;
    setText($("page-info"), `page ${state.page + 1}`);
  }

  function goTo(page) {
    if (page < 0 || page === state.page) return;
    if (page > state.page) {
      if (!state.next) return;
      state.cursors[page] = state.next;
    }
    state.cursors.length = page + 1;
    state.page = page;
    refresh();
  }

  let searchTimer = null;
  function filtersChanged() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      const prefix = $("search").value.trim();
      const status = $("status-filter").value;
      if (prefix === state.prefix && status === state.status) return;
      state.prefix = prefix;
      state.status = status;
      state.cursors = [""];
      state.page = 0;
      refresh();
    }, SEARCH_DELAY_MS);
  }

  function tick() {
    let due = false;
    for (const node of list.querySelectorAll(".countdown")) {
      setText(node, node.dataset.at ? until(node.dataset.at) : node.dataset.none || "—");
      if (node.dataset.at && Date.parse(node.dataset.at) < serverNow() - 300) due = true;
    }
    // A firing just passed: fetch now rather than at the next poll, so its run shows up at
    // once and the countdown moves on to the following occurrence.
    if (due && !state.failing && Date.now() - lastStart > 1500) refresh();
    for (const node of list.querySelectorAll("[data-rel]")) {
      setText(node, (node.dataset.prefix || "") + ago(node.dataset.rel));
    }
    for (const node of list.querySelectorAll("[data-since]")) {
      setText(node, `${span(serverNow() - Date.parse(node.dataset.since))} so far`);
    }
    if (state.lastOk) {
      const age = Date.now() - state.lastOk;
      setText(freshness, age < 1500 ? "updated just now" : `updated ${span(age)} ago`);
    }
  }

  if ($("resume-all")) $("resume-all").addEventListener("click", resumeAll);
  $("search").addEventListener("input", filtersChanged);
  $("status-filter").addEventListener("change", filtersChanged);
  $("prev-page").addEventListener("click", () => goTo(state.page - 1));
  $("next-page").addEventListener("click", () => goTo(state.page + 1));
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) refresh();
  });
  setInterval(tick, 1000);
  refresh();
})();

// The asynqpy console's pages: live updates from /api every data-refresh seconds, and the actions
// (POST with the CSRF token of the asynqpy_csrf cookie). Values are only ever set as textContent.
"use strict";

const body = document.body;
const refreshMs = Math.max(500, 1000 * parseFloat(body.dataset.refresh || "2"));
const readOnly = body.dataset.readOnly === "true";

function csrf() {
  const m = document.cookie.match(/(?:^|;\s*)asynqpy_csrf=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

function say(text) {
  const el = document.getElementById("message");
  el.textContent = text;
  clearTimeout(say.timer);
  say.timer = setTimeout(() => { el.textContent = ""; }, 4000);
}

async function getJSON(url) {
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!r.ok) throw new Error(`${r.status} ${url}`);
  return r.json();
}

async function post(url, payload) {
  const r = await fetch(url, {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf() },
    body: payload === undefined ? "{}" : JSON.stringify(payload),
  });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(data.error || `${r.status}`);
  return data;
}

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// -- times and durations, as asynqpy/core/humanize.py writes them (the CLI's; a browser test compares) --
function tenths(secs) {
  return `${(Math.floor(secs * 10 + 0.5) / 10).toFixed(1)}s`;
}

function duration(secs) {
  if (secs < 10) return tenths(secs);
  const s = Math.floor(secs), two = (n) => String(n).padStart(2, "0");
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${two(s % 60)}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${two(Math.floor((s % 3600) / 60))}m`;
  return `${Math.floor(s / 86400)}d${two(Math.floor((s % 86400) / 3600))}h`;
}

function latency(pending, seconds) {
  if (!pending) return "-";
  const secs = Math.max(0, seconds);
  if (secs < 59.95) return tenths(secs);
  return secs < 10 * 86400 ? duration(Math.max(60, secs)) : `${Math.floor(secs / 86400)}d`;
}

function ago(iso, now) {
  if (!iso) return "-";
  const secs = (Date.parse(iso) - (now === undefined ? Date.now() : now)) / 1000;
  const text = duration(Math.abs(secs));
  return secs > 0 ? `in ${text}` : `${text} ago`;
}

function utc(iso) {
  return iso ? new Date(Date.parse(iso)).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "";
}

function when(iso, now) {
  return iso ? `${utc(iso)} (${ago(iso, now)})` : "";
}

function timeCell(iso) {  // a list's time: how long ago / in how long, the exact time and raw value in its title
  const cell = el("td");
  if (iso) cell.appendChild(el("time", ago(iso), { datetime: iso, title: `${utc(iso)} · ${iso}` }));
  return cell;
}

function setWhen(cell, iso) {  // a detail page's time: the UTC time and how far it is, the raw value in its title
  cell.replaceChildren();
  if (iso) cell.appendChild(el("time", when(iso), { datetime: iso, title: iso }));
}

function short(value, n) {
  const text = value === null || value === undefined ? "" : (typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value));
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button.act");
  if (!b || readOnly) return;
  if (b.dataset.confirm && !window.confirm(b.dataset.confirm)) return;
  let url = b.dataset.post;
  if (b.dataset.prompt) {  // an action that takes a value (a server's concurrency, a tenant's weight...)
    const value = window.prompt(b.dataset.prompt, b.dataset.value || "");
    if (value === null) return;
    url += `?${b.dataset.param || "concurrency"}=${encodeURIComponent(value.trim())}`;
  }
  try {
    if (b.dataset.post) {
      const res = await post(url);
      if (res.response !== undefined) { say(`done: ${short(res.response, 100)}`); tick(); return; }
      if (res.ack !== undefined) { say(`server: ${res.ack}`); tick(); return; }
      if (res.queued) { say("queued"); tick(); return; }
      if (res.task_id !== undefined) { say(`enqueued task ${res.task_id}`); return; }
      if (b.classList.contains("reload")) { say("done"); setTimeout(() => location.reload(), 300); return; }
    } else {
      const res = await post(`/api/queues/${encodeURIComponent(body.dataset.queue)}/actions`,
        { action: b.dataset.action, ids: [b.dataset.id] });
      const outcome = res.results[b.dataset.id];
      if (outcome !== "ok") throw new Error(outcome);
    }
    say("done");
    tick();
  } catch (e) {
    say(`refused: ${e.message}`);
  }
});

const search = document.getElementById("search");
if (search) {
  search.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = document.getElementById("search-id").value.trim();
    if (id) location.href = `/queues/${encodeURIComponent(body.dataset.queue)}/tasks/${encodeURIComponent(id)}`;
  });
}

// -- selected tasks (a queue's page): checkboxes kept across live updates, then one batch action ---------
const selected = new Set();

function showSelection() {
  const n = document.getElementById("selected-count");
  if (!n) return;
  n.textContent = String(selected.size);
  for (const b of document.querySelectorAll("button.bulk-act")) b.disabled = selected.size === 0;
  const all = document.getElementById("select-all");
  const picks = document.querySelectorAll("input.pick");
  if (all) all.checked = picks.length > 0 && [...picks].every((p) => p.checked);
}

document.addEventListener("change", (ev) => {
  const t = ev.target;
  if (t.classList && t.classList.contains("pick")) {
    if (t.checked) selected.add(t.value); else selected.delete(t.value);
  } else if (t.id === "select-all") {
    for (const p of document.querySelectorAll("input.pick")) {
      p.checked = t.checked;
      if (t.checked) selected.add(p.value); else selected.delete(p.value);
    }
  } else return;
  showSelection();
});

document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button.bulk-act");
  if (!b || readOnly || !selected.size) return;
  const ids = [...selected];
  if (b.dataset.action === "delete" && !window.confirm(`Delete ${ids.length} selected task(s)?`)) return;
  try {
    const res = await post(`/api/queues/${encodeURIComponent(body.dataset.queue)}/actions`, { action: b.dataset.action, ids });
    const refused = Object.entries(res.results).filter(([, r]) => r !== "ok");
    say(refused.length ? `${ids.length - refused.length} done, ${refused.length} refused: ${refused.map(([id, r]) => `${id}: ${r}`).join("; ")}`
      : `${b.dataset.action}: ${ids.length} done`);
    selected.clear();
    showSelection();
    tick();
  } catch (e) {
    say(`refused: ${e.message}`);
  }
});

// -- the search page: act on every match (the count first, then the question) ------------------------------
const searchAct = document.getElementById("search-act");
if (searchAct) {
  searchAct.addEventListener("click", async () => {
    if (readOnly) return;
    const action = document.getElementById("search-action").value;
    const q = encodeURIComponent(body.dataset.queue), query = searchAct.dataset.query;
    try {
      const n = (await getJSON(`/api/queues/${q}/search/count?${query}`)).matches;
      if (!n) { say("no task matches"); return; }
      if (!window.confirm(`${action} ${n} matching task(s) in queue ${body.dataset.queue}?`)) { say("nothing done"); return; }
      const r = await post(`/api/queues/${q}/search/${encodeURIComponent(action)}?${query}`);
      const skipped = Object.entries(r.skipped).map(([s, k]) => `${s} ${k}`).join(", ") || "none";
      say(`${r.action}: ${r.done} done; skipped (state) ${skipped}; gone ${r.gone}; refused ${Object.keys(r.refused).length}`);
      setTimeout(() => location.reload(), 1500);
    } catch (e) {
      say(`refused: ${e.message}`);
    }
  });
}

// -- forms: enqueue a task, edit one (the server checks every field; its error is shown on the page) -------
function formError(text) {
  const e = document.getElementById("form-error");
  e.textContent = text;
}

const enqueueForm = document.getElementById("enqueue");
if (enqueueForm) {
  enqueueForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    formError("");
    const v = (id) => document.getElementById(id).value;
    try {
      const res = await post("/api/tasks", { queue: v("f-queue").trim(), type: v("f-type").trim(),
        payload_json: v("f-payload"), options_json: v("f-options") });
      location.href = `/queues/${encodeURIComponent(res.task.queue)}/tasks/${encodeURIComponent(res.task.id)}`;
    } catch (e) {
      formError(`not enqueued: ${e.message}`);
    }
  });
}

const editForm = document.getElementById("edit");
if (editForm) {
  editForm.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    formError("");
    const changes = {};
    const payload = document.getElementById("e-payload");
    if (payload.value !== payload.defaultValue) changes.payload_json = payload.value;
    for (const k of ["max_retry", "priority"]) {
      const input = document.getElementById(`e-${k}`);
      if (input.value !== input.defaultValue) changes[k] = input.value.trim() === "" ? null : Number(input.value);
    }
    const when = document.getElementById("e-process_in").value.trim();
    if (when !== "") changes.process_in = Number(when);
    try {
      await post(editForm.dataset.post, changes);
      location.reload();
    } catch (e) {
      formError(`not changed: ${e.message}`);
    }
  });
}

// -- overview ---------------------------------------------------------------------------------------
const samples = [];
function drawChart() {
  const svg = document.getElementById("chart");
  if (!svg) return;
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const rates = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    rates.push({ ok: Math.max(0, (samples[i].ok - samples[i - 1].ok) / dt), bad: Math.max(0, (samples[i].bad - samples[i - 1].bad) / dt) });
  }
  if (!rates.length) return;
  const top = Math.max(1, ...rates.map((r) => Math.max(r.ok, r.bad)));
  for (const [key, cls] of [["ok", "ok"], ["bad", "bad"]]) {
    const pts = rates.map((r, i) => `${(i * 600) / Math.max(1, rates.length - 1)},${118 - (r[key] / top) * 110}`).join(" ");
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("points", pts);
    line.setAttribute("class", cls);
    svg.appendChild(line);
  }
  const last = rates[rates.length - 1];
  document.getElementById("rate-ok").textContent = last.ok.toFixed(1);
  document.getElementById("rate-failed").textContent = last.bad.toFixed(1);
}

async function overview() {
  const queues = await getJSON("/api/queues");
  const tbody = document.querySelector("#queues tbody");
  let ok = 0, bad = 0;
  for (const q of queues) {
    ok += q.processed_total; bad += q.failed_total;
    let row = tbody.querySelector(`tr[data-queue="${CSS.escape(q.queue)}"]`);
    if (!row) {
      const empty = tbody.querySelector("tr.empty");
      if (empty) empty.remove();
      row = el("tr", null, { "data-queue": q.queue });
      const name = el("td");
      name.appendChild(el("a", q.queue, { href: `/queues/${encodeURIComponent(q.queue)}` }));
      row.appendChild(name);
      for (const k of ["paused", "size", "pending", "active", "scheduled", "retry", "archived", "completed", "waiting", "blocked", "latency", "processed_total", "failed_total"]) {
        row.appendChild(el("td", "", { "data-k": k }));
      }
      tbody.appendChild(row);
    }
    for (const cell of row.querySelectorAll("td[data-k]")) {
      const k = cell.dataset.k;
      cell.textContent = k === "paused" ? (q.paused ? "paused" : "run") : k === "latency" ? latency(q.pending, q.latency) : String(q[k]);
    }
  }
  samples.push({ t: Date.now(), ok, bad });
  if (samples.length > 61) samples.shift();
  drawChart();
}

// -- a queue's tasks --------------------------------------------------------------------------------
function actionsFor(state) {
  if (state === "active") return ["cancel"];
  if (state === "scheduled" || state === "retry") return ["run", "archive", "delete"];
  if (state === "archived") return ["run", "delete"];
  if (state === "pending" || state === "targeted" || state === "waiting" || state === "blocked") return ["archive", "delete"];
  return ["delete"];
}

async function queuePage() {
  const q = body.dataset.queue, state = body.dataset.state;
  const base = `/api/queues/${encodeURIComponent(q)}`;
  const [info, page] = await Promise.all([
    getJSON(base),
    getJSON(`${base}/tasks?state=${encodeURIComponent(state)}&page=${body.dataset.pageNo}&size=${body.dataset.size}`),
  ]);
  for (const b of document.querySelectorAll("[data-count]")) b.textContent = String(info.info[b.dataset.count]);
  const tbody = document.querySelector("#tasks tbody");
  const rows = [];
  for (const t of page.tasks) {
    const row = el("tr", null, { "data-id": t.id });
    if (!readOnly) {
      const pick = el("td");
      const box = el("input", null, { type: "checkbox", class: "pick", value: t.id });
      box.checked = selected.has(t.id);
      pick.appendChild(box);
      row.appendChild(pick);
    }
    const idCell = el("td");
    idCell.appendChild(el("a", t.id, { href: `/queues/${encodeURIComponent(q)}/tasks/${encodeURIComponent(t.id)}` }));
    row.appendChild(idCell);
    row.appendChild(el("td", t.type));
    row.appendChild(el("td", short(t.payload, 120), { class: "payload" }));
    row.appendChild(el("td", `${t.retried}/${t.max_retry}`));
    row.appendChild(el("td", (t.last_error || "").slice(0, 80)));
    row.appendChild(timeCell(t.next_process_at || t.archived_at || t.completed_at));
    if (!readOnly) {
      const cell = el("td");
      for (const a of actionsFor(state)) cell.appendChild(el("button", a, { class: "act", "data-action": a, "data-id": t.id }));
      row.appendChild(cell);
    }
    rows.push(row);
  }
  if (!rows.length) {
    const row = el("tr", null, { class: "empty" });
    row.appendChild(el("td", `no ${state} task`, { colspan: "8" }));
    rows.push(row);
  }
  tbody.replaceChildren(...rows);
  const shown = new Set(page.tasks.map((t) => t.id));
  for (const id of [...selected]) if (!shown.has(id)) selected.delete(id);  // (gone from the page: not acted on)
  showSelection();
  const pages = Math.max(1, Math.ceil(page.total / page.size));
  document.getElementById("pages").textContent = String(pages);
}

// -- one task -----------------------------------------------------------------------------------------
async function taskPage() {
  const data = await getJSON(`/api/queues/${encodeURIComponent(body.dataset.queue)}/tasks/${encodeURIComponent(body.dataset.id)}`);
  const t = data.task;
  for (const cell of document.querySelectorAll("#detail td[data-k]")) {
    const k = cell.dataset.k;
    if (k === "next_process_at") setWhen(cell, t[k]);
    else cell.textContent = k === "retried" ? `${t.retried} of ${t.max_retry}` : k === "progress" ? (t.progress === null ? "" : JSON.stringify(t.progress)) : (t[k] || "");
  }
}

async function serversPage() {
  const servers = await getJSON("/api/servers");
  const rows = [];
  for (const s of servers) {
    const row = el("tr", null, { "data-id": s.id });
    for (const v of [s.name, s.host, s.pid, s.asynqpy_version || "?", `${s.active.length}/${s.concurrency}`,
      Object.entries(s.queues).map(([k, w]) => `${k}=${w}`).join(" ")]) row.appendChild(el("td", v));
    row.appendChild(timeCell(s.started));
    row.appendChild(el("td", s.status));
    if (!readOnly) {
      const cell = el("td");
      for (const a of [s.status === "quiet" ? "resume" : "quiet", "stop"]) {
        const attrs = { class: "act", "data-post": `/api/servers/${encodeURIComponent(s.id)}/${a}` };
        if (a === "stop") attrs["data-confirm"] = `Stop server ${s.name || s.id} gracefully?`;
        cell.appendChild(el("button", a, attrs));
      }
      cell.appendChild(el("button", "scale", { class: "act", "data-post": `/api/servers/${encodeURIComponent(s.id)}/scale`,
        "data-prompt": `Handlers server ${s.name || s.id} runs at once (1-100000):`, "data-value": String(s.concurrency) }));
      row.appendChild(cell);
    }
    rows.push(row);
    for (const w of s.active) {
      const sub = el("tr", null, { class: "sub" });
      sub.appendChild(el("td"));
      sub.appendChild(el("td", `running ${w.type} ${w.task_id} (${w.queue}) since ${utc(w.started)}`, { colspan: "8" }));
      rows.push(sub);
    }
  }
  if (!rows.length) {
    const row = el("tr", null, { class: "empty" });
    row.appendChild(el("td", "no live server", { colspan: "9" }));
    rows.push(row);
  }
  document.querySelector("#servers tbody").replaceChildren(...rows);
}

// -- durable processes ----------------------------------------------------------------------------
const processSearch = document.getElementById("process-search");
if (processSearch) {
  processSearch.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = document.getElementById("process-id").value.trim();
    if (id) location.href = `/queues/${encodeURIComponent(body.dataset.queue)}/processes/${encodeURIComponent(id)}`;
  });
}

async function processesPage() {
  const q = body.dataset.queue;
  const status = body.dataset.status || "";
  const page = await getJSON(`/api/queues/${encodeURIComponent(q)}/processes?page=${body.dataset.pageNo}&size=${body.dataset.size}&status=${encodeURIComponent(status)}`);
  const rows = [];
  for (const p of page.processes) {
    const row = el("tr", null, { "data-id": p.id });
    const idCell = el("td");
    idCell.appendChild(el("a", p.id, { href: `/queues/${encodeURIComponent(q)}/processes/${encodeURIComponent(p.id)}` }));
    row.appendChild(idCell);
    row.appendChild(el("td", p.type));
    row.appendChild(el("td", p.status, { class: `status-${p.status}` }));
    row.appendChild(el("td", p.events));
    row.appendChild(timeCell(p.timer));
    row.appendChild(timeCell(p.updated));
    row.appendChild(el("td", (p.error || "").slice(0, 80)));
    rows.push(row);
  }
  if (!rows.length) {
    const row = el("tr", null, { class: "empty" });
    row.appendChild(el("td", `no ${status ? status + " " : ""}process`, { colspan: "7" }));
    rows.push(row);
  }
  document.querySelector("#processes tbody").replaceChildren(...rows);
  document.getElementById("total").textContent = String(page.total);
  document.getElementById("pages").textContent = String(Math.max(1, Math.ceil(page.total / page.size)));
}

async function processPage() {
  const latest = body.dataset.first === "0";  // the latest events: their table follows too
  const url = `/api/queues/${encodeURIComponent(body.dataset.queue)}/processes/${encodeURIComponent(body.dataset.id)}?count=${latest ? body.dataset.count : 0}`;
  const r = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  const cell = (k) => document.querySelector(`#detail td[data-k="${k}"]`);
  if (r.status === 404) {  // removed
    cell("status").textContent = "removed";
    for (const b of document.querySelectorAll("button.act")) b.disabled = true;
    return;
  }
  if (!r.ok) throw new Error(`${r.status} ${url}`);
  const p = (await r.json()).process;
  for (const k of ["status", "events", "first_event", "timer", "updated", "error"]) {
    if (k === "timer" || k === "updated") setWhen(cell(k), p[k]);
    else cell(k).textContent = p[k] === null ? "" : String(p[k]);
  }
  const by = cell("broken_by");
  by.replaceChildren();
  if (p.broken_by) by.appendChild(el("a", p.broken_by, { href: `/queues/${encodeURIComponent(body.dataset.queue)}/tasks/${encodeURIComponent(p.broken_by)}` }));
  document.getElementById("state").textContent = JSON.stringify(p.state, null, 2);
  const repair = document.getElementById("repair");
  if (repair) repair.disabled = p.status !== "error";
  if (!latest) return;
  const rows = p.history.map((e) => {
    const row = el("tr");
    for (const v of [e.id, utc(e.at), e.input, e.kind]) row.appendChild(el("td", v));
    row.appendChild(el("td", JSON.stringify(e.data), { class: "payload" }));
    return row;
  });
  if (!rows.length) {
    const row = el("tr", null, { class: "empty" });
    row.appendChild(el("td", "no event", { colspan: "5" }));
    rows.push(row);
  }
  document.querySelector("#history tbody").replaceChildren(...rows);
}

const PAGES = { overview, queue: queuePage, task: taskPage, servers: serversPage, processes: processesPage, process: processPage };

async function tick() {
  const fn = PAGES[body.dataset.page];
  if (!fn) return;
  const live = document.getElementById("live");
  try {
    await fn();
    live.classList.remove("stale");
    body.dataset.updates = String(parseInt(body.dataset.updates || "0", 10) + 1);  // (tests wait on it)
  } catch (e) {
    live.classList.add("stale");
  }
}

tick();
setInterval(tick, refreshMs);

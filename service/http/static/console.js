/* The Strata console: plain script over the admin API (/v1/...), no build step.
 * Every refresh makes a fixed handful of requests whatever the partition count:
 * /v1/cluster, one page of /v1/topics, one page of /v1/groups, /v1/history for the
 * rows on screen, plus one request per topic or group the user has opened.
 * Rows are updated in place (keyed by name), so charts and open rows survive refreshes. */
"use strict";

const PAGE = 25, PARTITION_PAGE = 50, REFRESH_MS = 2000;
const state = {
  topicOffset: 0, groupOffset: 0, filter: "", showInternal: false,
  openTopics: new Map(),   // topic -> first partition shown
  openGroups: new Map(),   // group -> first partition row shown
  charts: new Map(),       // key -> {plot, node}
  browseNext: null,
};

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") node.className = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "kB", "MB", "GB", "TB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i++; }
  return (i === 0 ? Math.round(n) : n.toFixed(n >= 100 ? 0 : 1)) + " " + units[i];
}
const fmtRate = (n) => fmtBytes(n) + "/s";
const plural = (n, word) => `${fmtNum(n)} ${word}${n === 1 ? "" : "s"}`;
const fmtNum = (n) => (n === null || n === undefined) ? "–" : Math.round(n).toLocaleString("en-US");
const range = (lo, hi) => (lo === null || hi === null || hi <= lo) ? "–" : `${fmtNum(lo)} – ${fmtNum(hi - 1)}`;  // first – last offset

async function get(path) {
  const r = await fetch(path);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error(`${path}: ${body.message || r.status}`);
  return body;
}

/* A sparkline: uPlot without axes, updated in place when its node survives. */
function spark(key, node, times, values, color, height) {
  const data = [times, values.map((v) => (v === null ? null : v))];
  const held = state.charts.get(key);
  if (held && held.node === node && node.isConnected) { held.plot.setData(data); return; }
  if (held) held.plot.destroy();
  const width = node.clientWidth || 110;
  const plot = new uPlot({
    width, height: height || 22, cursor: { show: false }, legend: { show: false }, select: { show: false },
    axes: [{ show: false }, { show: false }], scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(hi, 1)] } },
    series: [{}, { stroke: color, width: 1.5, fill: color + "22", points: { show: false } }],
  }, data, node);
  state.charts.set(key, { plot, node });
}

function pruneCharts() {
  for (const [key, held] of state.charts) {
    if (!held.node.isConnected) { held.plot.destroy(); state.charts.delete(key); }
  }
}

/* The picture of a log: remote only | both | not uploaded | local only | active, by bytes. */
function picture(s) {
  const remoteOnly = Math.max(0, s.remote_bytes - s.local_and_remote_bytes);
  const both = s.local_and_remote_bytes, lag = s.upload_lag_bytes, active = s.active_segment_bytes;
  const localOnly = Math.max(0, s.local_bytes - both - lag - active);
  const parts = [["seg-remote", remoteOnly, "remote only"], ["seg-both", both, "local and remote"],
    ["seg-lag", lag, "sealed, not uploaded yet"], ["seg-local", localOnly, "local only"],
    ["seg-active", active, "active segment"]];
  const total = parts.reduce((a, p) => a + p[1], 0);
  const bar = el("div", { class: "picture", title: parts.map((p) => `${p[2]}: ${fmtBytes(p[1])}`).join("\n") });
  for (const [cls, bytes, label] of parts) {
    if (!bytes) continue;
    bar.append(el("i", { class: cls, style: `width:${(100 * bytes / total).toFixed(2)}%`,
      dataset: { bytes: String(bytes), part: label } }));
  }
  return { bar, total: remoteOnly + s.local_bytes };
}

function setCells(tr, values) {
  values.forEach((v, i) => {
    const td = tr.children[i];
    if (v instanceof Node) { td.replaceChildren(v); } else if (td.textContent !== String(v)) td.textContent = v;
  });
}

/* Keep tbody's keyed rows in the given order, creating rows with make() and dropping the rest. */
function syncRows(tbody, keys, attr, make) {
  const existing = new Map([...tbody.querySelectorAll(`tr[data-${attr}]`)].map((tr) => [tr.dataset[attr], tr]));
  const rows = [];
  for (const key of keys) {
    const tr = existing.get(key) || make(key);
    existing.delete(key);
    rows.push(tr);
    const detail = tr._detail;
    if (detail) rows.push(detail);
  }
  for (const tr of existing.values()) { if (tr._detail) tr._detail.remove(); tr.remove(); }
  tbody.replaceChildren(...rows);
}

function pager(node, offset, total, size, move) {
  node.replaceChildren();
  if (total <= size) return;
  const last = Math.min(offset + size, total);
  node.append(`${offset + 1}–${last} of ${fmtNum(total)} `);
  if (offset > 0) node.append(el("button", { type: "button", onclick: () => move(Math.max(0, offset - size)) }, "‹ previous"));
  if (last < total) node.append(el("button", { type: "button", onclick: () => move(offset + size) }, "next ›"));
}

// --------------------------------------------------------------------------- summary

function renderSummary(c, hist) {
  $("cluster-id").textContent = `cluster ${c.cluster_id} · Strata ${c.version}`;
  const controller = c.brokers.find((b) => b.controller);
  $("brokers").textContent = plural(c.brokers.length, "broker");
  $("broker-list").replaceChildren(...c.brokers.map((b) => el("div", {},
    `${b.node_id} · ${b.host}:${b.port}`, b.controller ? el("span", { class: "badge" }, "controller") : null,
    b.fenced ? el("span", { class: "badge fenced" }, "fenced") : null,
    b.this_broker ? el("span", { class: "muted" }, " (this one)") : null)));
  if (!controller) $("broker-list").append(el("div", { class: "error" }, `controller ${c.controller_id} not registered`));
  const t = c.throughput;
  $("rate-in").textContent = fmtRate(t.bytes_in_per_sec);
  $("rate-out").textContent = fmtRate(t.bytes_out_per_sec);
  $("records-in").textContent = `${fmtNum(t.records_in_per_sec)} records/s`;
  $("records-out").textContent = `${fmtNum(t.records_out_per_sec)} records/s`;
  $("tiering").textContent = c.tiering_enabled ? "tiering on" : "tiering off";
  $("bucket").textContent = c.object_store + (c.object_store_endpoint ? ` at ${c.object_store_endpoint}` : "");
  $("counts").textContent = plural(c.user_topics, "topic");
  $("counts-detail").textContent = `${plural(c.partitions, "partition")} · ${plural(c.groups, "group")} · ` +
    `${c.internal_topics} internal`;
  spark("in", $("chart-in"), hist.timestamps, hist.totals.bytes_in_per_sec, "#0a84ff", 44);
  spark("out", $("chart-out"), hist.timestamps, hist.totals.bytes_out_per_sec, "#34c759", 44);
}

// --------------------------------------------------------------------------- topics

/* A row keyed by name: `cells` cells (numeric ones right-aligned), a sparkline cell, and a
 * click that opens or closes its detail row (remembered in `opened`: name -> first item). */
function keyedRow(kind, name, cells, numeric, sparkAt, opened, open) {
  const tr = el("tr", { class: kind, dataset: { [kind]: name } });
  for (let i = 0; i < cells; i++) tr.append(el("td", i === 0 ? { class: "name" } : numeric.includes(i) ? { class: "num" } : {}));
  tr.children[sparkAt].append(el("div", { class: "spark" }));
  tr.addEventListener("click", () => {
    if (opened.has(name)) { opened.delete(name); tr._detail.remove(); tr._detail = null; tr.classList.remove("open"); }
    else { opened.set(name, 0); open(tr, name); }
  });
  return tr;
}

const topicRow = (name) => keyedRow("topic", name, 9, [1, 2, 3, 5, 7, 8], 4, state.openTopics, openTopic);

function renderTopics(body, hist) {
  const tbody = $("topics").querySelector("tbody");
  syncRows(tbody, body.topics.map((t) => t.name), "topic", topicRow);
  for (const t of body.topics) {
    const tr = tbody.querySelector(`tr[data-topic="${CSS.escape(t.name)}"]`);
    const pic = picture(t);
    setCells(tr, [t.name, fmtNum(t.partitions), fmtNum(t.records), fmtRate(t.bytes_in_per_sec), tr.children[4].firstChild,
      fmtRate(t.bytes_out_per_sec), pic.bar, fmtBytes(pic.total),
      t.remote_storage_enable ? `${fmtNum(t.upload_lag_offsets)} offsets · ${fmtBytes(t.upload_lag_bytes)}` : "not tiered"]);
    if (t.last_upload_error) tr.children[8].append(el("div", { class: "error small" }, t.last_upload_error));
    const series = hist.topics[t.name];
    if (series) spark("t:" + t.name, tr.children[4].firstChild, hist.timestamps, series.bytes_in_per_sec, "#0a84ff");
  }
  pager($("topics-pager"), state.topicOffset, body.total, PAGE, (o) => { state.topicOffset = o; refresh(); });
  const n = body.internal_topics;
  $("internal-toggle").textContent = n ? `${state.showInternal ? "▾" : "▸"} ${n} internal topic${n === 1 ? "" : "s"}` : "";
}

async function openTopic(tr, name) {
  tr.classList.add("open");
  const first = state.openTopics.get(name) || 0;
  const body = await get(`/v1/topics/${enc(name)}/partitions?offset=${first}&limit=${PARTITION_PAGE}`);
  if (!state.openTopics.has(name)) return;
  const table = el("table", { class: "partitions" }, el("thead", {}, el("tr", {},
    ...["partition", "leader", "isr", "log start", "high watermark", "remote", "local", "both", "log", "upload lag", ""]
      .map((h) => el("th", {}, h)))));
  const rows = body.partitions.map((p) => {
    const both = p.remote_log_start_offset === null ? [null, null]
      : [Math.max(p.remote_log_start_offset, p.local_log_start_offset), Math.min(p.remote_next_offset, p.log_end_offset)];
    return el("tr", { class: "partition", dataset: { partition: String(p.partition) } },
      el("td", { class: "num" }, String(p.partition)), el("td", { class: "num" }, String(p.leader)),
      el("td", {}, (p.isr || []).join(",")), el("td", { class: "num" }, fmtNum(p.log_start_offset)),
      el("td", { class: "num" }, fmtNum(p.high_watermark)),
      el("td", {}, range(p.remote_log_start_offset, p.remote_next_offset)),
      el("td", {}, range(p.local_log_start_offset, p.log_end_offset)), el("td", {}, range(both[0], both[1])),
      el("td", {}, picture(p).bar),
      el("td", { class: "num" }, p.remote_storage_enable ? `${fmtNum(p.upload_lag_offsets)} · ${fmtBytes(p.upload_lag_bytes)}` : "–"),
      el("td", {}, el("button", { type: "button", class: "link", onclick: (e) => { e.stopPropagation(); browseFrom(name, p.partition); } }, "records")));
  });
  table.append(el("tbody", {}, ...rows));
  const pg = el("div", { class: "pager" });
  pager(pg, first, body.total, PARTITION_PAGE, (o) => { state.openTopics.set(name, o); openTopic(tr, name); });
  const detail = el("tr", { class: "detail" }, el("td", { colspan: "9" }, table, pg));
  if (tr._detail) tr._detail.replaceWith(detail); else tr.after(detail);
  tr._detail = detail;
}

async function renderInternal() {
  const table = $("internal-topics");
  table.hidden = !state.showInternal;
  if (!state.showInternal) return;
  const body = await get("/v1/topics?kind=internal&limit=100");
  table.querySelector("tbody").replaceChildren(...body.topics.map((t) => el("tr", {},
    el("td", {}, t.name), el("td", { class: "num" }, `${fmtNum(t.partitions)} partitions`),
    el("td", { class: "num" }, `${fmtNum(t.records)} records`), el("td", { class: "num" }, fmtBytes(t.local_bytes)))));
}

// --------------------------------------------------------------------------- groups

function groupRow(name) {
  const tr = keyedRow("group", name, 7, [3, 4, 5], 6, state.openGroups, openGroup);
  tr.children[5].classList.add("lag");
  return tr;
}

function renderGroups(body, hist) {
  const tbody = $("groups").querySelector("tbody");
  syncRows(tbody, body.groups.map((g) => g.group_id), "group", groupRow);
  for (const g of body.groups) {
    const tr = tbody.querySelector(`tr[data-group="${CSS.escape(g.group_id)}"]`);
    setCells(tr, [g.group_id, g.type, g.state, fmtNum(g.members), fmtNum(g.partitions), fmtNum(g.lag), tr.children[6].firstChild]);
    const series = hist.groups[g.group_id];
    if (series) spark("g:" + g.group_id, tr.children[6].firstChild, hist.timestamps, series.lag, "#ff9f0a");
  }
  $("no-groups").hidden = body.total > 0;
  pager($("groups-pager"), state.groupOffset, body.total, PAGE, (o) => { state.groupOffset = o; refresh(); });
}

async function openGroup(tr, name) {
  tr.classList.add("open");
  const g = await get(`/v1/groups/${enc(name)}`);
  if (!state.openGroups.has(name)) return;
  const first = state.openGroups.get(name) || 0;
  const members = el("div", { class: "members small" }, ...g.members.map((m) => el("div", {},
    el("b", {}, m.member_id), ` ${m.client_id} ${m.client_host}`,
    m.member_epoch !== undefined ? ` · epoch ${m.member_epoch}` : "", " · ",
    (m.assignment || []).map((a) => `${a.topic} [${a.partitions.join(",")}]`).join(" ") || "no partitions")));
  if (!g.members.length) members.append("no live members");
  const rows = g.offsets.slice(first, first + PARTITION_PAGE).map((o) => el("tr", { class: "group-partition" },
    el("td", {}, o.topic), el("td", { class: "num" }, String(o.partition)), el("td", { class: "num" }, fmtNum(o.committed_offset)),
    el("td", { class: "num" }, fmtNum(o.high_watermark)), el("td", { class: "num lag" }, fmtNum(o.lag)),
    el("td", { class: "small" }, o.member_id || "–")));
  const table = el("table", {}, el("thead", {}, el("tr", {}, ...["topic", "partition", "committed", "high watermark", "lag", "member"]
    .map((h) => el("th", {}, h)))), el("tbody", {}, ...rows));
  const pg = el("div", { class: "pager" });
  pager(pg, first, g.offsets.length, PARTITION_PAGE, (o) => { state.openGroups.set(name, o); openGroup(tr, name); });
  const detail = el("tr", { class: "detail" }, el("td", { colspan: "7" },
    el("div", { class: "small muted" }, `${g.type} group, protocol ${g.protocol || "–"}, generation ${g.generation_id}`), members, table, pg));
  if (tr._detail) tr._detail.replaceWith(detail); else tr.after(detail);
  tr._detail = detail;
}

// --------------------------------------------------------------------------- records

function browseFrom(topic, partition) {
  $("b-topic").value = topic; $("b-partition").value = partition; $("b-mode").value = "latest";
  syncMode(); readRecords(null); $("browser").scrollIntoView();
}

function syncMode() {
  const mode = $("b-mode").value;
  $("b-offset").hidden = mode !== "offset";
  $("b-time").hidden = mode !== "timestamp";
}

async function readRecords(fromOffset) {
  const topic = $("b-topic").value, partition = $("b-partition").value;
  const params = new URLSearchParams({ max_records: $("b-max").value || "50", encoding: $("b-encoding").value });
  const mode = $("b-mode").value;
  if (fromOffset !== null) params.set("offset", fromOffset);
  else if (mode === "offset") params.set("offset", $("b-offset").value || "0");
  else if (mode === "timestamp") params.set("timestamp", String(new Date($("b-time").value).getTime()));
  $("b-status").textContent = "reading…";
  try {
    const r = await get(`/v1/topics/${enc(topic)}/partitions/${enc(partition)}/records?${params}`);
    const cell = (text, fmt) => el("td", { class: fmt === "hex" ? "hex" : "" }, text === null ? "null" : text);
    $("records").querySelector("tbody").replaceChildren(...r.records.map((rec) => el("tr", { class: "record" },
      el("td", { class: "num" }, String(rec.offset)), el("td", {}, new Date(rec.timestamp).toISOString()),
      cell(rec.key, rec.key_format), cell(rec.value, rec.value_format),
      el("td", { class: "small" }, rec.headers.map((h) => `${h.key}=${h.value}`).join(", ")))));
    state.browseNext = r.next_offset < r.high_watermark ? r.next_offset : null;
    $("b-next").disabled = state.browseNext === null;
    $("b-status").textContent = `${r.records.length} record(s) from offset ${fmtNum(r.from_offset)} ` +
      `(log ${fmtNum(r.log_start_offset)} – ${fmtNum(r.high_watermark)}; read ${fmtBytes(r.bytes_read)} ` +
      `from ${[...new Set(r.sources)].join(" and ") || "nowhere"})` + (r.note ? ` · ${r.note}` : "");
  } catch (e) {
    $("b-status").textContent = e.message;
  }
}

// --------------------------------------------------------------------------- refresh

let refreshing = false;
async function refresh() {
  if (refreshing) return;
  refreshing = true;
  try {
    const q = state.filter ? `&q=${enc(state.filter)}` : "";
    const [cluster, topics, groups] = await Promise.all([get("/v1/cluster"),
      get(`/v1/topics?kind=user&offset=${state.topicOffset}&limit=${PAGE}${q}`),
      get(`/v1/groups?offset=${state.groupOffset}&limit=${PAGE}`)]);
    const series = new URLSearchParams();
    topics.topics.forEach((t) => series.append("topic", t.name));
    groups.groups.forEach((g) => series.append("group", g.group_id));
    const hist = await get(`/v1/history?${series}`);
    renderSummary(cluster, hist);
    renderTopics(topics, hist);
    renderGroups(groups, hist);
    $("b-topics").replaceChildren(...topics.topics.map((t) => el("option", { value: t.name })));
    const opened = [];
    for (const tr of $("topics").querySelectorAll("tr.topic.open")) opened.push(openTopic(tr, tr.dataset.topic));
    for (const tr of $("groups").querySelectorAll("tr.group.open")) opened.push(openGroup(tr, tr.dataset.group));
    opened.push(renderInternal());
    await Promise.all(opened);
    pruneCharts();
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    $("updated").textContent = "update failed: " + e.message;
  } finally {
    refreshing = false;
  }
}

$("internal-toggle").addEventListener("click", () => { state.showInternal = !state.showInternal; refresh(); });
$("topic-filter").addEventListener("input", (e) => { state.filter = e.target.value.trim(); state.topicOffset = 0; refresh(); });
$("b-mode").addEventListener("change", syncMode);
$("browse-form").addEventListener("submit", (e) => { e.preventDefault(); readRecords(null); });
$("b-next").addEventListener("click", () => { if (state.browseNext !== null) readRecords(state.browseNext); });
refresh();
setInterval(() => { if (!document.hidden) refresh(); }, REFRESH_MS);

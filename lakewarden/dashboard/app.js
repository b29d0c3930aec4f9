// lakewarden's dashboard: a page per concern, each reading the JSON API (/api/v1) and refreshing
// itself every few seconds. No build step: this file is served as it is.
"use strict";

const API = "/api/v1";
const REFRESH_MS = 2000;
const view = document.getElementById("view");
let active = null; // the mounted page: {update, timer}

// ---- helpers

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function cookie(name) {
  const found = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
  return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
}

async function api(path, options = {}) {
  // signed in by the session cookie (HttpOnly); a change also sends the CSRF cookie's value as a header,
  // which a page of another site cannot read
  const headers = {"Content-Type": "application/json"};
  if ((options.method || "GET") !== "GET") headers["X-CSRF-Token"] = cookie("lakewarden_csrf");
  const init = {...options, headers, credentials: "same-origin"};
  if (init.body !== undefined && typeof init.body !== "string") init.body = JSON.stringify(init.body);
  const response = await fetch(API + path, init);
  if (response.status === 204) return null;
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    if (response.status === 401 && path !== "/session") signIn(body?.error?.message);
    const error = new Error(body?.error?.message || `${response.status} ${response.statusText}`);
    error.status = response.status;
    throw error;
  }
  return body;
}

const fmt = {
  num: (n) => (n ?? 0).toLocaleString("en-US"),
  bytes(n) {
    n = Number(n || 0);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
  },
  time: (iso) => (iso ? new Date(iso).toLocaleString("en-GB", {hour12: false}) : "—"),
  duration(ms) {
    if (ms === null || ms === undefined) return "—";
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
    return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  },
  ago(iso) { return iso ? fmt.duration(Date.now() - new Date(iso).getTime()) + " ago" : "never"; },
  pct: (r) => (r === null || r === undefined ? "—" : `${Math.round(r * 100)}%`),
  cost: (n, currency) => `${Number(n || 0).toFixed(n >= 1 ? 2 : 6)} ${currency || ""}`.trim(),
};

// what Spark measured of a process, a task or everything a table or group ran (`spark_*` in summed usage)
function usageText(u, currency) {
  if (!u) return "";
  const get = (k) => Number(u[k] ?? u[`spark_${k}`] ?? 0);
  if (!get("tasks") && !get("whole_cpu_ms")) return "";
  return `CPU ${fmt.duration(get("whole_cpu_ms"))} in all, ${fmt.duration(get("cpu_ms"))} on executors · cores held ${fmt.duration(get("run_ms"))} · read ${fmt.bytes(get("read_bytes"))}` +
    ` · wrote ${fmt.bytes(get("written_bytes"))} · ${fmt.num(get("tasks"))} Spark tasks · peak memory ${fmt.bytes(get("peak_memory_bytes"))}` +
    (currency !== undefined ? ` · cost ${fmt.cost(get("cost"), currency)}` : "");
}

function badge(text) {
  return `<span class="badge ${esc(String(text).replace(/\s+/g, "-"))}">${esc(text)}</span>`;
}

function grid(columns, rows, attrs = () => "") {
  const head = columns.map((c) => `<th class="${c.endsWith("#") ? "num" : ""}">${esc(c.replace(/#$/, ""))}</th>`).join("");
  const body = rows.map((row, i) => `<tr ${attrs(i)}>${row.map((cell, j) =>
    `<td class="${columns[j].endsWith("#") ? "num" : ""}">${cell}</td>`).join("")}</tr>`).join("");
  return `<table><thead><tr>${head}</tr></thead><tbody>${body || `<tr><td colspan="${columns.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

function kv(pairs) {
  return `<table class="kv"><tbody>${pairs.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${v}</td></tr>`).join("")}</tbody></table>`;
}

// what optimizing bought, added up (a table's or a group's `optimizing_benefit`): files its scans did not open
function benefitText(net) {
  if (!net || !net.processes) return "";
  return ` · bought: scans opened ${fmt.num(Math.round(net.files_saved))} fewer files for ${fmt.num(Math.round(net.cpu_seconds))} CPU-s ` +
    `of ${fmt.num(net.processes)} processes (${net.files_saved_per_cpu_second.toFixed(1)} files per CPU-s)`;
}

function tablePath(identifier) {
  const [catalog, ...rest] = identifier.split(".");
  const table = rest.pop();
  return `${encodeURIComponent(catalog)}/${encodeURIComponent(rest.join("."))}/${encodeURIComponent(table)}`;
}

// the exact files an optimizing process changed: the first page of /processes/{id}/files
const FILE_CHANGES = {rewritten_files: "data file rewritten", added_files: "data file written",
  removed_delete_files: "delete file removed", added_delete_files: "position-delete file written"};
const SHOWN_FILES = 100;
function fileChanges(page) {
  if (!page || !page.files.length) return "";
  const more = page.total > page.files.length ? `<p class="muted">${fmt.num(page.total - page.files.length)} more files: ` +
    `<span class="mono">lakewarden process files</span> or <span class="mono">/api/v1/processes/{id}/files</span></p>` : "";
  return grid(["change", "file"], page.files.map((f) => [esc(FILE_CHANGES[f.kind] || f.kind), `<span class="mono">${esc(f.path)}</span>`])) + more;
}

function resultText(p) {
  const s = p.summary || {};
  if (p.action === "optimizing") {
    if (!("files_in" in s)) return "";
    const deletes = s.delete_files_removed || s.delete_files_added ? `; delete files −${fmt.num(s.delete_files_removed || 0)} +${fmt.num(s.delete_files_added || 0)}` : "";
    const undone = s.yields ? `; yielded to writers ${fmt.num(s.yields)}× (${fmt.num((s.yielded_cpu_ms || 0) / 1000)} CPU-s undone)` : "";
    const left = s.groups_yielded ? `; ${fmt.num(s.groups_yielded)} file group(s) left to writers` : "";
    return `${fmt.num(s.files_in)} → ${fmt.num(s.files_out)} files, ${fmt.bytes(s.bytes_in)} → ${fmt.bytes(s.bytes_out)}${deletes}${left}${undone}`;
  }
  const parts = Object.entries(s)
    .filter(([k, v]) => typeof v === "number" && v && !k.endsWith("_ms") && !k.endsWith("_id") && !k.startsWith("spark_") && k !== "cost")
    .map(([k, v]) => `${k.replace(/_/g, " ")} ${k.includes("bytes") ? fmt.bytes(v) : fmt.num(v)}`);
  return (s.dry_run ? "dry run: " : "") + parts.join(", ");
}

function parseProperties(text) {
  const properties = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`properties: "${line}" is not key=value`);
    properties[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return properties;
}

function processRows(processes, withTable) {
  return processes.map((p) => [
    `<span class="mono">${p.process_id}</span>`,
    ...(withTable ? [`<a href="#/tables/${tablePath(p.table)}">${esc(p.table)}</a>`] : []),
    esc(p.action), esc(p.type), badge(p.status), esc(p.stage), fmt.time(p.start_time),
    fmt.duration(p.duration_ms ?? (Date.now() - new Date(p.start_time).getTime())),
    esc(resultText(p)), p.usage.tasks ? fmt.cost(p.usage.cost, p.currency) : "",
    `<span class="error">${esc(p.fail_reason || "")}</span>`,
  ]);
}

// ---- pages

function overviewPage() {
  return {
    mount(root) {
      root.innerHTML = `<h1>Overview</h1><div class="cards" id="cards"></div>
        <h2>Running processes</h2><div id="running"></div>
        <h2>Server nodes</h2><div id="nodes"></div>`;
    },
    async update(root) {
      const [o, running, nodes, here] = await Promise.all([
        api("/overview"), api("/processes?status=running&limit=50"), api("/nodes"), api("/health")]);
      root.querySelector("#nodes").innerHTML = grid(["node", "role", "started", "last seen"], nodes.map((n) => [
        `${esc(n.url)}${n.url === here.node ? ' <span class="muted">(serving this page)</span>' : ""}`,
        badge(n.leader ? "leader" : "follower"), fmt.time(n.started_at), fmt.time(n.last_seen_at)]),
        (i) => `data-node="${esc(nodes[i].url)}"`);
      const card = (id, label, value, sub = "") =>
        `<div class="card" id="card-${id}"><div class="label">${esc(label)}</div><div class="value">${value}</div><div class="sub">${sub}</div></div>`;
      const t = o.tables, op = o.optimizing, m = o.maintenance, w = o.optimizers;
      root.querySelector("#cards").innerHTML = [
        card("tables", "Tables managed", fmt.num(t.total), `${fmt.num(t.idle || 0)} idle`),
        card("pending", "Pending", fmt.num(t.pending || 0), "waiting to be planned"),
        card("optimizing", "Optimizing", fmt.num(t.optimizing || 0), `${fmt.num(op.running)} processes running`),
        card("files", "Files optimized", `${fmt.num(op.files_in)} → ${fmt.num(op.files_out)}`, `${fmt.num(op.succeeded)} processes succeeded`),
        card("bytes", "Bytes optimized", fmt.bytes(op.bytes_in), `written as ${fmt.bytes(op.bytes_out)}`),
        card("threads", "Optimizer threads", `${fmt.num(w.busy)} / ${fmt.num(w.threads)}`,
             `${fmt.num(w.idle)} idle · ${fmt.num(w.queued_tasks)} tasks queued · ${fmt.num(w.optimizers)} optimizers`),
        card("maintenance", "Maintenance", `${fmt.num(m.files_deleted + m.delete_files_removed + m.data_files_deleted)} files`,
             `${fmt.bytes(m.bytes_freed)} freed · ${fmt.num(m.snapshots_expired)} snapshots expired · ${fmt.num(m.tags_created)} tags`),
        card("catalogs", "Catalogs", fmt.num(o.catalogs.total), `${fmt.num(o.catalogs.unhealthy)} unhealthy`),
        card("cost", "Cost of processes", fmt.cost(o.usage.cost, o.currency),
             `Spark CPU ${fmt.duration(o.usage.spark_cpu_ms)} · cores held ${fmt.duration(o.usage.spark_run_ms)} · wrote ${fmt.bytes(o.usage.spark_written_bytes)}`),
      ].join("");
      root.querySelector("#running").innerHTML = grid(
        ["id", "table", "action", "type", "status", "stage", "start", "duration", "result", "cost#", "error"],
        processRows(running, true), (i) => `data-process-id="${running[i].process_id}"`);
    },
  };
}

function catalogsPage() {
  return {
    mount(root) {
      root.innerHTML = `<h1>Catalogs</h1><div id="catalogs"></div><div class="ok" id="catalog-message"></div>`;
      root.addEventListener("click", async (event) => {
        const name = event.target.dataset.refresh;
        if (!name) return;
        const message = root.querySelector("#catalog-message");
        try {
          const result = await api(`/catalogs/${encodeURIComponent(name)}/refresh`, {method: "POST"});
          message.className = "ok";
          message.textContent = `${name}: ${result.health}, ${result.added.length} added, ${result.updated.length} updated, ` +
            `${result.disposed.length} disposed; ${result.tables} in all`;
        } catch (error) { message.className = "error"; message.textContent = error.message; }
      });
    },
    async update(root) {
      const catalogs = await api("/catalogs");
      root.querySelector("#catalogs").innerHTML = grid(
        ["name", "type", "health", "tables#", "last refresh", "error", ""],
        catalogs.map((c) => [esc(c.name), esc(c.type), badge(c.health), fmt.num(c.table_count),
          `${fmt.time(c.last_refresh_at)} <span class="muted">(${fmt.ago(c.last_refresh_at)})</span>`,
          `<span class="error">${esc(c.last_error || "")}</span>`,
          `<button class="secondary" data-refresh="${esc(c.name)}">Refresh now</button>`]),
        (i) => `data-catalog="${esc(catalogs[i].name)}"`);
    },
  };
}

const TABLES_PAGE = 200;

function tablesPage() {
  return {
    mount(root) {
      root.innerHTML = `<h1>Tables</h1>
        <div class="toolbar"><input id="table-filter" placeholder="filter by name"> <select id="status-filter">
        <option value="">every status</option><option>idle</option><option>pending</option><option>planning</option>
        <option>minor-optimizing</option><option>major-optimizing</option><option>full-optimizing</option></select>
        <select id="format-filter"><option value="">every format</option><option>iceberg</option><option>hudi</option><option>paimon</option></select>
        <button id="first-page" disabled>first page</button> <button id="next-page" disabled>next page</button></div>
        <div id="tables"></div>`;
      // filtered and paged by the server (keyset: `after` the last table shown), so a million tables page as fast
      this.after = null;
      const again = () => { this.after = null; this.update(root); };
      root.querySelector("#table-filter").addEventListener("input", again);
      root.querySelector("#status-filter").addEventListener("change", again);
      root.querySelector("#format-filter").addEventListener("change", again);
      root.querySelector("#first-page").addEventListener("click", again);
      root.querySelector("#next-page").addEventListener("click", () => { this.after = this.last; this.update(root); });
      root.addEventListener("click", (event) => {
        const row = event.target.closest("tr[data-table]");
        if (row && event.target.tagName !== "A") location.hash = `#/tables/${tablePath(row.dataset.table)}`;
      });
    },
    async update(root) {
      const status = root.querySelector("#status-filter").value;
      const text = root.querySelector("#table-filter").value.trim();
      const query = new URLSearchParams({ limit: String(TABLES_PAGE) });
      if (status) query.set("status", status);
      const format = root.querySelector("#format-filter").value;
      if (format) query.set("format", format);
      if (text) query.set("name", text);
      if (this.after) query.set("after", this.after);
      const tables = await api(`/tables?${query}`);
      this.last = tables.length === TABLES_PAGE ? tables[tables.length - 1].identifier : null;
      root.querySelector("#next-page").disabled = !this.last;
      root.querySelector("#first-page").disabled = !this.after;
      root.querySelector("#tables").innerHTML = grid(
        ["table", "format", "status", "group", "health", "data files#", "delete files#", "size#", "refreshed"],
        tables.map((t) => [`<a href="#/tables/${tablePath(t.identifier)}">${esc(t.identifier)}</a>`, esc(t.format), badge(t.status),
          esc(t.group), `<span class="dot ${esc(t.health)}"></span>${esc(t.health)} <span class="muted">small ${fmt.pct(t.small_file_ratio)} · deletes ${fmt.pct(t.delete_file_ratio)}</span>`,
          fmt.num(t.data_files), fmt.num(t.delete_files), fmt.bytes(t.files_size_bytes), fmt.ago(t.last_refreshed_at)]),
        (i) => `class="clickable" data-table="${esc(tables[i].identifier)}"`);
    },
  };
}

const TABLE_TABS = [["overview", "Overview"], ["history", "History"], ["reads", "Reads"], ["files", "Partitions & files"],
                    ["snapshots", "Snapshots & timeline"], ["processes", "Processes"], ["config", "Configuration"],
                    ["hudi", "Hudi timeline & files"], ["paimon", "Paimon snapshots & files"]];
// the tabs a table of another format than Iceberg has: what lakewarden reads of it, and no Iceberg work
const FORMAT_TABS = {hudi: ["overview", "history", "hudi", "config"], paimon: ["overview", "history", "paimon", "config"]};
const ACTIONS = ["expire-snapshots", "clean-orphan-files", "clean-dangling-delete-files", "expire-data",
                 "auto-create-tags", "rewrite-manifests"];

function tablePage(catalog, database, table, tab = "overview") {
  const path = `/tables/${catalog}/${database}/${table}`;
  const identifier = [catalog, database, table].map(decodeURIComponent).join(".");
  let slowAt = 0; // files and snapshots are read less often than the rest
  return {
    mount(root) {
      const tabs = TABLE_TABS.map(([key, label]) =>
        `<a href="#${path}/${key}" class="${key === tab ? "active" : ""}" data-tab="${key}">${label}</a>`).join("");
      root.innerHTML = `<h1>${esc(identifier)} <span id="table-status"></span></h1><div class="tabs">${tabs}</div>
        <div class="panel" id="tab"></div>`;
      if (tab === "overview") {
        root.querySelector("#tab").insertAdjacentHTML("afterend", `<form id="action-form">
          <label>maintenance action<select id="action">${ACTIONS.map((a) => `<option>${a}</option>`).join("")}</select></label>
          <label>dry run<input type="checkbox" id="dry-run"></label>
          <button type="submit">Run now</button> <button type="button" class="secondary" id="evaluate">Evaluate now</button>
          <div class="error" id="action-error"></div><div class="ok" id="action-message"></div></form>`);
        const form = root.querySelector("#action-form");
        const show = (ok, text) => {
          form.querySelector("#action-error").textContent = ok ? "" : text;
          form.querySelector("#action-message").textContent = ok ? text : "";
        };
        form.addEventListener("submit", async (event) => {
          event.preventDefault();
          const action = form.querySelector("#action").value;
          const body = form.querySelector("#dry-run").checked ? {dry_run: true} : {};
          try {
            const result = await api(`${path}/actions/${action}`, {method: "POST", body});
            show(true, result.created ? `process ${result.process_id} created: ${action}` : `no process created: ${result.reason}`);
          } catch (error) { show(false, error.message); }
        });
        form.querySelector("#evaluate").addEventListener("click", async () => {
          try { const t = await api(`${path}/evaluate`, {method: "POST"}); show(true, `evaluated: ${t.status}`); this.update(root); }
          catch (error) { show(false, error.message); }
        });
      }
    },
    async update(root) {
      const t = await api(path);
      root.querySelector("#table-status").innerHTML = `${badge(t.status)} <span class="muted">${esc(t.format)}</span>`;
      const shown = FORMAT_TABS[t.format] || TABLE_TABS.map(([key]) => key).filter((key) => !(key in FORMAT_TABS));
      root.querySelectorAll(".tabs a[data-tab]").forEach((a) => { a.hidden = !shown.includes(a.dataset.tab); });
      const form = root.querySelector("#action-form");
      if (form) form.hidden = t.format !== "iceberg";
      const target = root.querySelector("#tab");
      const slow = Date.now() - slowAt > 10000;
      if (tab === "overview") {
        const e = t.evaluation || {};
        const partitions = (e.partitions || []).slice(0, 100);
        target.innerHTML = `<div class="grid2"><div>${kv([
          ["status", `${badge(t.status)} since ${fmt.time(t.status_changed_at)}`], ["group", esc(t.group)],
          ["health", `<span class="dot ${esc(t.health)}"></span>${esc(t.health)} (small files ${fmt.pct(t.small_file_ratio)}, delete files ${fmt.pct(t.delete_file_ratio)})`],
          ["data files", fmt.num(t.data_files)], ["delete files", fmt.num(t.delete_files)], ["size", fmt.bytes(t.files_size_bytes)],
          ["current snapshot", `<span class="mono">${esc(t.current_snapshot_id ?? "—")}</span>`],
          ["metadata", `<span class="mono">${esc(t.metadata_location || "")}</span>`],
          ["last refreshed", fmt.time(t.last_refreshed_at)], ["refresh error", `<span class="error">${esc(t.refresh_error || "")}</span>`],
          ["last minor / major / full", [t.last_minor_optimizing_at, t.last_major_optimizing_at, t.last_full_optimizing_at].map(fmt.time).join(" · ")],
          ["full optimizing clusters by", esc(e.clustering || "— (bin-pack)")],
          ["cost of its processes", esc(usageText(t.usage, t.currency) || "nothing yet")],
          ["what optimizing bought", esc(benefitText(t.optimizing_benefit).replace(" · bought: ", "") || "no scans to judge it by yet")],
        ])}</div><div><h2 style="margin-top:0">Why ${esc(t.status)}</h2>
          <p>verdict: <b>${esc(e.type || "nothing to optimize")}</b> · evaluated ${fmt.ago(t.evaluated_at)}</p>
          <ul class="reasons" id="reasons">${(e.reasons || []).map((r) => `<li>${esc(r)}</li>`).join("")}</ul>
          ${t.deferred ? `<p class="muted" id="deferred">${esc(t.deferred)}</p>` : ""}
          <h2>Maintenance</h2><div id="maintenance">${grid(["action", "enabled", "blocked by", "failing"], (t.maintenance || []).map((m) =>
            [esc(m.action), m.enabled ? "on" : "off", `<span class="error">${esc(m.blocked_by || "")}</span>`,
              m.failures ? `<span class="error">${fmt.num(m.failures)} in a row · next try ${fmt.time(m.retry_after)}</span>` : ""]))}</div></div></div>
          <h2>Partitions</h2>${t.format !== "iceberg"
            ? grid(["partition", "why"], partitions.map((p) => [esc(p.partition), esc((p.reasons || []).join("; "))]))
            : grid(["partition", "type", "data files#", "fragments#", "undersized#", "deletes#", "why"],
            partitions.map((p) => [esc(p.partition), esc(p.type || ""), fmt.num(p.data_files), fmt.num(p.fragment_files),
              fmt.num(p.undersized_files), fmt.num(p.position_delete_files + p.equality_delete_files), esc((p.reasons || []).join("; "))]))}`;
      } else if (tab === "history" && slow) {
        slowAt = Date.now();
        const history = await api(`${path}/history?limit=500`);
        if (!target.querySelector("#history-files")) {
          target.innerHTML = `<p class="muted" id="history-note"></p>
            <h2 style="margin-top:0">Files</h2><div class="chart"><canvas id="history-files"></canvas></div>
            <h2>File size and small files</h2><div class="chart"><canvas id="history-size"></canvas></div>`;
        }
        target.querySelector("#history-note").textContent = `${history.samples.length} samples of the table's shape ` +
          `(taken on a change, at most every few minutes) · ${history.processes.length} processes shaded: ` +
          `optimizing blue, maintenance violet, failed red`;
        tableHistoryCharts(target, history);
      } else if (tab === "reads") {
        const r = t.reads;
        const spread = (s, f = fmt.num) => `${f(s.p50)} · p95 ${f(s.p95)}`;
        const counts = (o) => Object.entries(o).map(([k, v]) => `${esc(k)} ${fmt.num(v)}`).join(" · ") || "—";
        if (!target.querySelector("#reads-chart")) {
          target.innerHTML = `<div id="reads-summary"></div><h2>The last day, hour by hour</h2>
            <div class="chart"><canvas id="reads-chart"></canvas></div>`;
        }
        target.querySelector("#reads-summary").innerHTML = r.scans_last_week === 0 && r.commits_last_day === 0
          ? `<p class="muted">No scans reported this week. Clients of lakewarden's REST catalog report theirs (Iceberg's ` +
            `scan reports), and scans it plans on the server are counted.</p>` : kv([
            ["scans", `${fmt.num(r.scans_last_hour)} in the last hour · ${fmt.num(r.scans_last_day)} in the day · ` +
              `${fmt.num(r.scans_last_week)} in the week · last ${fmt.ago(r.last_scan_at)}`],
            ["files per scan", spread(r.files_per_scan)], ["delete files per scan", spread(r.delete_files_per_scan)],
            ["bytes per scan", spread(r.bytes_per_scan, fmt.bytes)],
            ["planning time", spread(r.planning_ms, (v) => fmt.duration(v))],
            ["commits in the day", fmt.num(r.commits_last_day)],
            ["engines", counts(r.engines)], ["who reads", counts(r.principals)],
            ["partitions read most", counts(r.partitions)],
          ]);
        tableReadsChart(target.querySelector("#reads-chart"), r.hourly);
      } else if (tab === "files" && slow) {
        slowAt = Date.now();
        const files = await api(`${path}/files?limit=500`);
        target.innerHTML = `<p class="muted">${files.length} live files of the current snapshot (at most 500 shown)</p>` +
          grid(["partition", "content", "size#", "records#", "sequence#", "path"],
            files.map((f) => [esc(f.partition), esc(f.content), fmt.bytes(f.size_bytes), fmt.num(f.records), f.sequence_number,
              `<span class="mono">${esc(f.path)}</span>`]));
      } else if (tab === "snapshots" && slow) {
        slowAt = Date.now();
        const snapshots = await api(`${path}/snapshots?limit=50`);
        let timeline = `<p class="muted">The commit timeline is kept for tables of lakewarden's own (internal) catalogs.</p>`;
        try {
          const commits = await api(`${path}/timeline?limit=50`);
          timeline = grid(["version#", "operation", "snapshot", "client", "committed"], commits.map((c) => [c.version,
            esc(c.operation), `<span class="mono">${esc(c.snapshot_id ?? "")}</span>`, esc(c.client || ""), fmt.time(c.committed_at)]));
        } catch (error) { if (error.status !== 404) throw error; }
        target.innerHTML = `<h2 style="margin-top:0">Snapshots</h2>` + grid(["snapshot", "parent", "operation", "committed", "refs", "added files#", "records#"],
          snapshots.map((s) => [`<span class="mono">${s.snapshot_id}</span>`, `<span class="mono">${s.parent_snapshot_id ?? ""}</span>`,
            esc(s.operation || ""), fmt.time(s.committed_at), esc(s.refs.join(", ")), fmt.num(Number(s.summary["added-data-files"] || 0)),
            fmt.num(Number(s.summary["total-records"] || 0))])) + `<h2>Timeline</h2>${timeline}`;
      } else if (tab === "processes") {
        const processes = await api(`/processes?table=${encodeURIComponent(identifier)}&limit=50`);
        const detailed = processes.filter((p) => p.tasks.length).slice(0, 10);
        const files = await Promise.all(detailed.map((p) => p.action === "optimizing" ?
          api(`/processes/${p.process_id}/files?limit=${SHOWN_FILES}`) : null));
        target.innerHTML = grid(["id", "action", "type", "status", "stage", "start", "duration", "result", "cost#", "error"],
          processRows(processes, false), (i) => `data-process-id="${processes[i].process_id}"`) +
          detailed.map((p, i) => `<h2>Process ${p.process_id}: tasks</h2>` +
            (p.scheduling ? `<p class="muted" data-why="${p.process_id}">why this table: ${esc(p.scheduling.reason)}</p>` : "") +
            (p.benefit ? `<p class="muted" data-bought="${p.process_id}">what it bought: ${esc(p.benefit.text)}</p>` : "") +
            (p.summary?.yielded || []).map((y) => `<p class="muted" data-yielded="${p.process_id}">yielded to ` +
              `${esc(y.to === "commit" ? "a commit" : `a write of ${y.to}`)}: snapshot ${esc(y.snapshot_id)} undid ` +
              `${Math.round(y.share * 100)}% of task ${esc(y.task_id)} (${fmt.num(y.files_restored)} files back, ` +
              `${fmt.num(y.cpu_ms / 1000)} CPU-s wasted)</p>`).join("") +
            (p.diagnosis ? `<p class="error" data-diagnosis="${p.process_id}">${esc(p.diagnosis.root_cause)}` +
              `${p.diagnosis.hint ? `<br><b>hint:</b> ${esc(p.diagnosis.hint)}` : ""}</p>` : "") +
            grid(["task", "status", "partitions", "attempt#", "optimizer", "spark", "error"], p.tasks.map((k) => [k.task_id, badge(k.status),
              esc(k.partitions.join(", ")), k.attempt, `<span class="mono">${esc(k.optimizer || "")}</span>`,
              esc(usageText(k.usage)), `<span class="error">${esc(k.error || "")}</span>` +
              (k.diagnosis?.hint ? `<br><span class="muted">hint: ${esc(k.diagnosis.hint)}</span>` : "")])) + fileChanges(files[i])).join("");
      } else if (tab === "hudi" && slow) {
        slowAt = Date.now();
        const h = await api(`${path}/hudi?limit=100`);
        target.innerHTML = kv([["table type", esc(h.table_type)], ["table version", esc(h.table_version || "")],
            ["location", `<span class="mono">${esc(h.location)}</span>`], ["instants on the active timeline", fmt.num(h.instants)],
            ["pending compactions", esc(h.pending_compactions.map((i) => i.timestamp).join(", ") || "none")]]) +
          `<h2>What Hudi's table services would do</h2><p class="muted">lakewarden shows and judges Hudi tables; the work ` +
          `runs where Hudi's Spark bundle is, with the call shown.</p><div id="hudi-needs">` +
          grid(["service", "partition", "why", "call"], h.needs.map((n) => [esc(n.service), esc(n.partition || ""),
            esc(n.reason), `<span class="mono">${esc(n.procedure)}</span>`])) + `</div>` +
          `<h2>Timeline (newest first)</h2><div id="hudi-timeline">` + grid(["instant", "action", "state", "time"],
            h.timeline.map((i) => [`<span class="mono">${esc(i.timestamp)}</span>`, esc(i.action), esc(i.state), fmt.time(i.time)])) +
          `</div><h2>Partitions</h2>` + grid(["partition", "file groups#", "base files#", "log files#", "size#"],
            h.partitions.map((p) => [esc(p.partition || "(none)"), fmt.num(p.file_groups), fmt.num(p.base_files),
              fmt.num(p.log_files), fmt.bytes(p.size_bytes)])) +
          `<h2>File groups</h2>` + grid(["partition", "file group", "slice", "base file", "log files#", "size#"],
            h.file_groups.flatMap((g) => g.slices.map((s) => [esc(g.partition), `<span class="mono">${esc(g.file_id)}</span>`,
              `<span class="mono">${esc(s.base_instant)}</span>${s.latest ? " (latest)" : ""}`,
              `<span class="mono">${esc(s.base_file || "—")}</span>`, fmt.num(s.log_files.length),
              fmt.bytes(s.base_size_bytes + s.log_files.reduce((a, l) => a + l.size_bytes, 0))])));
      } else if (tab === "paimon" && slow) {
        slowAt = Date.now();
        const p = await api(`${path}/paimon?limit=100`);
        target.innerHTML = kv([["location", `<span class="mono">${esc(p.location)}</span>`],
            ["primary keys", esc(p.primary_keys.join(", ") || "none (an append table)")],
            ["partition keys", esc(p.partition_keys.join(", ") || "none")], ["snapshots", fmt.num(p.snapshot_count)],
            ["schemas", fmt.num(p.schemas.length)], ["tags", esc(p.tags.map((t) => `${t.name} (${t.snapshot_id})`).join(", ") || "none")],
            ["options", `<span class="mono">${esc(Object.entries(p.options).map(([k, v]) => `${k}=${v}`).join(" "))}</span>`]]) +
          `<h2>What Paimon's compaction and expiry would do</h2><p class="muted">lakewarden shows and judges Paimon tables; ` +
          `the work runs where Paimon's Spark bundle is, with the call shown.</p><div id="paimon-needs">` +
          grid(["work", "partition", "bucket", "why", "call"], p.needs.map((n) => [esc(n.service), esc(n.partition || ""),
            n.bucket ?? "", esc(n.reason), `<span class="mono">${esc(n.procedure)}</span>`])) + `</div>` +
          `<h2>Buckets</h2><div id="paimon-buckets">` + grid(["partition", "bucket", "files#", "per level", "sorted runs#", "size#"],
            p.buckets.map((b) => [esc(b.partition || "(none)"), b.bucket, fmt.num(b.files),
              esc(Object.entries(b.files_per_level).map(([l, n]) => `L${l}: ${n}`).join(", ")), fmt.num(b.sorted_runs),
              fmt.bytes(b.size_bytes)])) +
          `</div><h2>Snapshots (newest first)</h2><div id="paimon-snapshots">` + grid(["snapshot#", "kind", "schema#", "records#", "committed"],
            p.snapshots.map((s) => [s.id, esc(s.commit_kind), s.schema_id, fmt.num(s.total_records ?? 0), fmt.time(s.time)])) +
          `</div><h2>Schemas</h2>` + grid(["schema#", "columns"], p.schemas.map((s) => [s.id,
            esc(s.fields.map((f) => `${f.name} ${f.type}`).join(", "))]));
      } else if (tab === "config") {
        target.innerHTML = `<p class="muted">Effective configuration: built-in defaults &lt; the catalog's table.* &lt; table properties</p>` +
          kv(Object.entries(t.config).map(([k, v]) => [k, `<span class="mono">${esc(v)}</span>`]));
      }
    },
  };
}

function groupsPage() {
  const panels = new Map();
  let chartedAt = 0; // the load charts are read less often than the rest
  return {
    mount(root) {
      root.innerHTML = `<h1>Optimizer groups</h1>
        <form id="group-create"><b>Create a group</b><br>
          <label>name<input name="name" id="group-name" placeholder="etl"></label>
          <label>container<input name="container" id="group-container" value="local"></label>
          <label>properties (key=value per line)<textarea name="properties" id="group-properties">scheduling-policy=quota</textarea></label>
          <button type="submit">Create</button><div class="error" id="group-create-error"></div></form>
        <div id="groups"></div>`;
      const form = root.querySelector("#group-create");
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        const error = form.querySelector("#group-create-error");
        try {
          await api("/resource-groups", {method: "POST", body: {name: form.name.value.trim(), container: form.container.value.trim(),
            properties: parseProperties(form.properties.value)}});
          error.textContent = "";
          form.name.value = "";
          this.update(root);
        } catch (e) { error.textContent = e.message; }
      });
    },
    panel(root, group) {
      const element = document.createElement("div");
      element.className = "panel";
      element.dataset.group = group.name;
      const properties = Object.entries(group.properties).map(([k, v]) => `${k}=${v}`).join("\n");
      element.innerHTML = `<h2 style="margin-top:0">${esc(group.name)} <span class="muted" data-field="summary"></span></h2>
        <p class="muted" data-field="allocation"></p>
        <div data-field="optimizers"></div>
        <div class="chart"><canvas data-field="load-chart"></canvas></div>
        <form data-form="scale" novalidate><label>optimizers (instances)<input type="number" min="0" max="64" name="instances"
          value="${esc(group.properties.instances || 0)}"></label><button type="submit">Scale</button>
          <div class="error" data-field="scale-error"></div><div class="ok" data-field="scale-message"></div></form>
        <form data-form="edit"><label>properties (key=value per line)<textarea name="properties">${esc(properties)}</textarea></label>
          <button type="submit" class="secondary">Save</button><div class="error" data-field="edit-error"></div></form>`;
      const scale = element.querySelector('[data-form="scale"]');
      scale.addEventListener("submit", async (event) => {
        event.preventDefault();
        try {
          await api(`/resource-groups/${encodeURIComponent(group.name)}/scale`, {method: "POST", body: {instances: Number(scale.instances.value)}});
          element.querySelector('[data-field="scale-error"]').textContent = "";
          element.querySelector('[data-field="scale-message"]').textContent = `asked for ${scale.instances.value} optimizer(s)`;
        } catch (e) { element.querySelector('[data-field="scale-error"]').textContent = e.message; }
      });
      const edit = element.querySelector('[data-form="edit"]');
      edit.addEventListener("submit", async (event) => {
        event.preventDefault();
        const error = element.querySelector('[data-field="edit-error"]');
        try {
          await api(`/resource-groups/${encodeURIComponent(group.name)}`, {method: "PUT", body: {properties: parseProperties(edit.properties.value)}});
          error.textContent = "";
        } catch (e) { error.textContent = e.message; }
      });
      root.querySelector("#groups").appendChild(element);
      return element;
    },
    async update(root) {
      const groups = await api("/resource-groups");
      const optimizers = await Promise.all(groups.map((g) => api(`/resource-groups/${encodeURIComponent(g.name)}/optimizers`)));
      for (const [name, element] of panels) if (!groups.some((g) => g.name === name)) { element.remove(); panels.delete(name); }
      const chart = Date.now() - chartedAt > 10000;
      if (chart) chartedAt = Date.now();
      const loads = chart ? await Promise.all(groups.map((g) => api(`/resource-groups/${encodeURIComponent(g.name)}/history?limit=720`))) : [];
      groups.forEach((group, i) => {
        if (!panels.has(group.name)) panels.set(group.name, this.panel(root, group));
        const element = panels.get(group.name);
        const threads = optimizers[i].reduce((n, o) => n + o.threads, 0);
        element.querySelector('[data-field="summary"]').textContent =
          `container ${group.container} · ${group.table_count} tables · ${optimizers[i].length} optimizers, ${threads} threads · ${group.properties["scheduling-policy"] || "quota"}` +
          ` · cost ${fmt.cost(group.usage.cost, group.currency)} (Spark CPU ${fmt.duration(group.usage.spark_cpu_ms || 0)})` +
          benefitText(group.optimizing_benefit) +
          (group.container_error ? ` · container error: ${group.container_error}` : "");
        const allocation = group.allocation;
        element.querySelector('[data-field="allocation"]').textContent = allocation
          ? `dynamic allocation: ${allocation.idle_optimizers} idle, ${allocation.draining} draining · started ${allocation.scale_ups} time(s), ` +
            `drained ${allocation.scale_downs}, stopped at drain-timeout ${allocation.forced_stops}` +
            (allocation.backlog_seconds > 0 ? ` · demand waiting ${Math.round(allocation.backlog_seconds)}s` : "")
          : "";
        element.querySelector('[data-field="optimizers"]').innerHTML = grid(["optimizer", "threads#", "host", "spark application", "registered", "last heartbeat"],
          optimizers[i].map((o) => [`<span class="mono">${esc(o.optimizer_id)}</span>`, o.threads, esc(o.host || ""),
            o.spark_ui_url ? `<a href="${esc(o.spark_ui_url)}">${esc(o.spark_application_id)}</a> ${esc(o.spark_master)}` : esc([o.spark_application_id, o.spark_master].filter(Boolean).join(" ")),
            fmt.time(o.registered_at), fmt.ago(o.last_heartbeat_at)]), (k) => `data-optimizer="${esc(optimizers[i][k].optimizer_id)}"`);
        if (chart) groupLoadChart(element.querySelector('[data-field="load-chart"]'), loads[i]);
      });
    },
  };
}

function processesPage() {
  return {
    mount(root) {
      root.innerHTML = `<h1>Processes</h1><h2>Running</h2><div id="running"></div><div class="error" id="cancel-error"></div>
        <h2>Timeline of recent processes, per group and table</h2><div class="chart"><canvas id="timeline"></canvas></div>
        <h2>Recent <select id="action-filter"><option value="">every action</option><option>optimizing</option>
        ${ACTIONS.map((a) => `<option>${a}</option>`).join("")}</select></h2><div id="recent"></div>`;
      root.querySelector("#action-filter").addEventListener("change", () => this.update(root));
      root.addEventListener("click", async (event) => {
        const id = event.target.dataset.cancel;
        if (!id) return;
        try { await api(`/processes/${id}/cancel`, {method: "POST"}); this.update(root); }
        catch (e) { root.querySelector("#cancel-error").textContent = e.message; }
      });
    },
    async update(root) {
      const action = root.querySelector("#action-filter").value;
      const [running, recent] = await Promise.all([api("/processes?status=running&limit=200"),
        api(`/processes?limit=50${action ? `&action=${encodeURIComponent(action)}` : ""}`)]);
      root.querySelector("#running").innerHTML = grid(
        ["id", "table", "group", "action", "type", "stage", "duration", "threads#", "input#", "cost#", ""],
        running.map((p) => [`<span class="mono">${p.process_id}</span>`, `<a href="#/tables/${tablePath(p.table)}">${esc(p.table)}</a>`,
          esc(p.group), esc(p.action), esc(p.type), esc(p.stage), fmt.duration(Date.now() - new Date(p.start_time).getTime()),
          p.threads_in_use, fmt.bytes(p.input_bytes), p.usage.tasks ? fmt.cost(p.usage.cost, p.currency) : "", `<button class="secondary" data-cancel="${p.process_id}">Cancel</button>`]),
        (i) => `data-process-id="${running[i].process_id}" data-action="${esc(running[i].action)}"`);
      root.querySelector("#recent").innerHTML = grid(
        ["id", "table", "action", "type", "status", "stage", "start", "duration", "result", "cost#", "error"],
        processRows(recent, true), (i) => `data-process-id="${recent[i].process_id}" data-action="${esc(recent[i].action)}"`);
      const shown = new Map([...recent, ...running].map((p) => [p.process_id, p]));
      processTimeline(root.querySelector("#timeline"), [...shown.values()]);
    },
  };
}

function auditPage() {
  return {
    mount(root) {
      root.innerHTML = `<h1>Audit</h1><p class="muted">Who changed what: every successful change through the API,
        and namespaces and tables created, renamed, registered or dropped through the REST catalog
        (commits are on each table's timeline).</p>
        <p><input id="audit-principal" placeholder="only this principal"></p><div id="audit"></div>`;
      root.querySelector("#audit-principal").addEventListener("input", () => this.update(root));
    },
    async update(root) {
      const who = root.querySelector("#audit-principal").value.trim();
      const entries = await api(`/audit?limit=200${who ? `&principal=${encodeURIComponent(who)}` : ""}`);
      root.querySelector("#audit").innerHTML = grid(["time", "principal", "action", "target", "client"],
        entries.map((e) => [fmt.time(e.at), esc(e.principal), `<span class="mono">${esc(e.action)}</span>`,
          esc(e.target), esc(e.client || "")]), (i) => `data-audit="${entries[i].audit_id}"`);
    },
  };
}

// ---- routing and live refresh

const ROUTES = [
  [/^#?\/?$/, overviewPage, "overview"],
  [/^#\/catalogs$/, catalogsPage, "catalogs"],
  [/^#\/tables$/, tablesPage, "tables"],
  [/^#\/tables\/([^/]+)\/([^/]+)\/([^/]+)(?:\/(\w+))?$/, tablePage, "tables"],
  [/^#\/groups$/, groupsPage, "groups"],
  [/^#\/processes$/, processesPage, "processes"],
  [/^#\/audit$/, auditPage, "audit"],
];

function route() {
  if (active) clearInterval(active.timer);
  const hash = location.hash || "#/";
  const found = ROUTES.find(([pattern]) => pattern.test(hash));
  if (!found) { view.innerHTML = `<h1>Not found</h1><p><a href="#/">Overview</a></p>`; return; }
  const [pattern, make, nav] = found;
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === nav));
  const page = make(...hash.match(pattern).slice(1).filter((x) => x !== undefined));
  const root = document.createElement("div"); // a new element: the previous page's listeners go with the old one
  view.replaceChildren(root);
  page.mount(root);
  const tick = () => refreshOn(page, root);
  if (!document.getElementById("signed-in")) showWho();
  tick();
  active = {timer: setInterval(tick, REFRESH_MS)};
}

async function refreshOn(page, root) {
  const live = document.getElementById("live");
  try {
    await page.update(root);
    live.className = "live";
    live.textContent = "live";
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString("en-GB", {hour12: false})}`;
  } catch (error) {
    if (error.status === 401) return; // the sign-in form is showing
    live.className = "live stale";
    live.textContent = `not updating: ${error.message}`;
  }
}

window.addEventListener("hashchange", route);
route();

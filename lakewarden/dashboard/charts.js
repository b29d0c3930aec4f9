// lakewarden's dashboard charts, on Chart.js (vendor/chart.umd.min.js). Loaded before app.js, whose helpers
// (fmt) they use when they draw. No build step: this file is served as it is.
"use strict";

// Chart.js is MIT-licensed and shipped with the package (vendor/): no CDN, the dashboard works offline.

const COLOR = {data: "#1f6feb", delete: "#cf222e", small: "#b58400", size: "#8250df", busy: "#1a7f37",
  threads: "#687385", queued: "#bf3989", pending: "#b58400"};
const BAND = {optimizing: "rgba(31, 111, 235, 0.16)", maintenance: "rgba(130, 80, 223, 0.14)",
  failed: "rgba(207, 34, 46, 0.16)"};
const ms = (iso) => new Date(iso).getTime();
const timeLabel = (value) => new Date(value).toLocaleString("en-GB",
  {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", hour12: false});

// processes drawn as shaded spans behind a chart's lines, labelled, on the same time axis
const processBands = {
  id: "processBands",
  beforeDatasetsDraw(chart, _args, options) {
    const {ctx, chartArea: area, scales: {x}} = chart;
    ctx.save();
    ctx.font = "10px system-ui, sans-serif";
    for (const band of options.items || []) {
      const left = Math.max(area.left, x.getPixelForValue(band.start));
      const right = Math.min(area.right, x.getPixelForValue(band.end));
      if (right < area.left || left > area.right) continue;
      ctx.fillStyle = band.color;
      ctx.fillRect(left, area.top, Math.max(2, right - left), area.bottom - area.top);
      ctx.fillStyle = "#3d4754";
      ctx.fillText(band.label, left + 2, area.top + 10);
    }
    ctx.restore();
  },
};

function timeScale(min, max) {
  // ticks as precise as the span needs: seconds within an hour, the date beyond a day
  const span = max - min;
  const options = span < 3600000 ? {hour: "2-digit", minute: "2-digit", second: "2-digit"}
    : span < 86400000 ? {hour: "2-digit", minute: "2-digit"} : {month: "short", day: "numeric", hour: "2-digit", minute: "2-digit"};
  const tick = (value) => new Date(value).toLocaleString("en-GB", {...options, hour12: false});
  return {type: "linear", min, max, ticks: {maxTicksLimit: 7, callback: tick}};
}

// draws a chart on the canvas, or updates the one already there (no flicker on the page's refresh)
function drawChart(canvas, config) {
  const existing = Chart.getChart(canvas);
  if (existing) {
    existing.data = config.data;
    existing.options = config.options;
    existing.update("none");
    return existing;
  }
  return new Chart(canvas, {...config, plugins: [processBands]});
}

function chartOptions(min, max, extra = {}) {
  return {animation: false, responsive: true, maintainAspectRatio: false, parsing: true,
    interaction: {mode: "nearest", intersect: false},
    plugins: {legend: {position: "bottom"}, tooltip: {callbacks: {title: (items) => items.length ? timeLabel(items[0].parsed.x) : ""}}},
    ...extra, scales: {x: timeScale(min, max), ...(extra.scales || {})}};
}

// a step line of samples, carried on to `until` (the state since the last sample)
function steps(samples, value, until) {
  const points = samples.map((s) => ({x: ms(s.sampled_at), y: value(s)}));
  return points.length ? [...points, {x: until, y: points[points.length - 1].y}] : points;
}

function line(label, data, color, axis = "y") {
  return {label, data, borderColor: color, backgroundColor: color, stepped: true, pointRadius: data.length > 60 ? 0 : 2,
    borderWidth: 2, yAxisID: axis};
}

function tableHistoryCharts(root, history) {
  const now = Date.now();
  const samples = history.samples;
  const bands = history.processes.map((p) => ({
    start: ms(p.start_time), end: p.end_time ? ms(p.end_time) : now,
    label: `${p.action === "optimizing" ? p.type : p.action} #${p.process_id}`,
    color: p.status === "failed" ? BAND.failed : p.action === "optimizing" ? BAND.optimizing : BAND.maintenance,
  }));
  const starts = [...samples.map((s) => ms(s.sampled_at)), ...bands.map((b) => b.start)];
  const min = starts.length ? Math.min(...starts) : now - 3600000;
  const withBands = (extra) => {
    const options = chartOptions(min, now, extra);
    options.plugins.processBands = {items: bands};
    return options;
  };
  drawChart(root.querySelector("#history-files"), {type: "line", data: {datasets: [
    line("data files", steps(samples, (s) => s.data_files, now), COLOR.data),
    line("small data files", steps(samples, (s) => s.small_files, now), COLOR.small),
    line("delete files", steps(samples, (s) => s.delete_files, now), COLOR.delete),
  ]}, options: withBands({scales: {y: {beginAtZero: true, title: {display: true, text: "files"}}}})});
  drawChart(root.querySelector("#history-size"), {type: "line", data: {datasets: [
    line("average file size (MiB)", steps(samples, (s) => s.average_file_bytes / 1048576, now), COLOR.size),
    line("total size (MiB)", steps(samples, (s) => s.total_bytes / 1048576, now), COLOR.data, "y1"),
    line("small-file share (%)", steps(samples, (s) => 100 * (s.small_file_ratio ?? 0), now), COLOR.small, "y2"),
  ]}, options: withBands({scales: {
    y: {beginAtZero: true, title: {display: true, text: "MiB per file"}},
    y1: {beginAtZero: true, position: "right", title: {display: true, text: "MiB"}, grid: {drawOnChartArea: false}},
    y2: {min: 0, max: 100, position: "right", title: {display: true, text: "% small"}, grid: {drawOnChartArea: false}},
  }})});
}

// a table's last day of reads, hour by hour: scans and commits, and the files a scan planned on average
function tableReadsChart(canvas, hourly) {
  const now = Date.now();
  const min = hourly.length ? ms(hourly[0].hour) : now - 86400000;
  const at = (h) => ms(h.hour);
  drawChart(canvas, {type: "line", data: {datasets: [
    line("scans", hourly.map((h) => ({x: at(h), y: h.scans})), COLOR.data),
    line("commits", hourly.map((h) => ({x: at(h), y: h.commits})), COLOR.threads),
    line("files per scan", hourly.map((h) => ({x: at(h), y: h.files_per_scan})), COLOR.small, "y1"),
  ]}, options: chartOptions(min, now, {scales: {
    y: {beginAtZero: true, ticks: {precision: 0}, title: {display: true, text: "per hour"}},
    y1: {beginAtZero: true, position: "right", title: {display: true, text: "files per scan"}, grid: {drawOnChartArea: false}},
  }})});
}

function groupLoadChart(canvas, samples) {
  const now = Date.now();
  const min = samples.length ? ms(samples[0].sampled_at) : now - 3600000;
  drawChart(canvas, {type: "line", data: {datasets: [
    line("threads", steps(samples, (s) => s.threads, now), COLOR.threads),
    line("busy threads", steps(samples, (s) => s.busy, now), COLOR.busy),
    line("queued tasks", steps(samples, (s) => s.queued, now), COLOR.queued),
    line("pending tables", steps(samples, (s) => s.pending_tables, now), COLOR.pending),
  ]}, options: chartOptions(min, now, {scales: {y: {beginAtZero: true, ticks: {precision: 0}}}})});
}

// a Gantt chart of processes: one row per group and table, a bar from start to end (or now) per process
function processTimeline(canvas, processes) {
  const now = Date.now();
  const row = (p) => `${p.group} · ${p.table}`;
  const rows = [...new Set(processes.map(row))].sort();
  const bars = (kind) => processes.filter((p) => (p.action === "optimizing") === (kind === "optimizing"))
    .map((p) => ({x: [ms(p.start_time), p.end_time ? ms(p.end_time) : now], y: row(p), process: p}));
  const starts = processes.map((p) => ms(p.start_time));
  const min = starts.length ? Math.min(...starts) : now - 3600000;
  canvas.parentElement.style.height = `${Math.max(160, 60 + rows.length * 26)}px`;
  drawChart(canvas, {type: "bar", data: {labels: rows, datasets: [
    {label: "optimizing", data: bars("optimizing"), backgroundColor: COLOR.data, borderSkipped: false, grouped: false, maxBarThickness: 16},
    {label: "maintenance", data: bars("maintenance"), backgroundColor: COLOR.size, borderSkipped: false, grouped: false, maxBarThickness: 16},
  ]}, options: {...chartOptions(min, now), indexAxis: "y",
    plugins: {legend: {position: "bottom"}, tooltip: {callbacks: {
      title: (items) => items.length ? items[0].raw.y : "",
      label: (item) => { const p = item.raw.process; return `#${p.process_id} ${p.action} ${p.type} ${p.status} · ${fmt.duration((p.end_time ? ms(p.end_time) : now) - ms(p.start_time))}`; },
    }}},
    scales: {x: timeScale(min, now), y: {type: "category"}}}});
}


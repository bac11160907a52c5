// fedrank dashboard: polls GET /v1/dashboard every 2 s and draws its panels with uPlot.
// Figures come from the server as they are (the status body is /v1/status's); the only
// figure computed here is the ingestion rate, from two successive polls' accepted totals.
"use strict";

const POLL_MS = 2000;
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
  "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];
const charts = {};
let token = sessionStorage.getItem("fedrank-admin-token") || "";
let previous = null;  // the last poll's {t, accepted}
let selectedMetric = null;

const $ = (id) => document.getElementById(id);
const text = (id, value) => { $(id).textContent = value; };
const fmt = (x, digits = 4) => (x === null || x === undefined) ? "-" :
  (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toPrecision(digits)) : String(x));
const seconds = (s) => (s === null || s === undefined) ? "-" : `${Math.max(0, s).toFixed(0)} s`;
const withheld = "withheld (admin token)";

function chart(id, series, data, opts = {}) {
  // Draw (or redraw) the uPlot chart in element `id`; recreated when the series change.
  const el = $(id);
  const key = series.map((s) => s.label).join("|");
  const width = Math.max(300, el.clientWidth || 400);
  let c = charts[id];
  if (!c || c.key !== key) {
    if (c) c.plot.destroy();
    el.textContent = "";
    const plot = new uPlot({
      width, height: opts.height || 200,
      scales: { x: { time: false }, ...(opts.yRange ? { y: { range: opts.yRange } } : {}) },
      // versions and iterations are whole numbers: no fractional ticks on x
      axes: [{ label: opts.xLabel || "", incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] },
        { label: opts.yLabel || "", size: 60 }],
      legend: { live: false },
      series: [{ label: opts.xLabel || "x" }, ...series.map((s, i) => ({
        label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, points: { size: 4 },
      }))],
    }, data, el);
    c = charts[id] = { key, plot };
  } else {
    c.plot.setData(data);
  }
  if (data[0].length === 1) {  // one point: uPlot would stretch x to 0-100
    c.plot.setScale("x", { min: data[0][0] - 1, max: data[0][0] + 1 });
  }
}

function showAlerts(alerts) {
  const box = $("alerts");
  box.textContent = "";
  for (const a of alerts) {
    const div = document.createElement("div");
    div.className = `alert ${a.level}`;
    div.dataset.code = a.code;
    div.textContent = a.text;
    box.appendChild(div);
  }
}

function rows(tbodyParent, items) {
  const body = $(tbodyParent).querySelector("tbody");
  body.textContent = "";
  for (const cells of items) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    }
    body.appendChild(tr);
  }
}

function showModel(d) {
  const s = d.status, m = d.model;
  text("workload", d.workload);
  text("model-version", s.model_version);
  text("iteration", s.iteration);
  text("policy", s.policy);
  const versions = m.versions;
  const x = versions.map((v) => v.version);
  if (versions.length && versions[0].params) {
    const names = m.names || versions[0].params.map((_, i) => `w${i}`);
    // the weights that moved most over the whole history: one line each (at most 10)
    const first = versions[0].params, last = versions[versions.length - 1].params;
    const order = names.map((_, i) => i)
      .sort((a, b) => Math.abs(last[b] - first[b]) - Math.abs(last[a] - first[a])).slice(0, 10);
    // weights differ by orders of magnitude: each line is its weight's change since the
    // first version shown, so that every one's movement is visible on one axis
    text("model-chart-title",
      `change of each weight since version ${x[0]} (the ${order.length} that moved most)`);
    chart("chart-model", order.map((i) => ({ label: names[i] })),
      [x, ...order.map((i) => versions.map((v) => v.params[i] - first[i]))],
      { xLabel: "model version", yLabel: "change" });
    if (versions.length > 1) {
      const before = versions[versions.length - 2].params;
      const movers = names.map((n, i) => [n, before[i], last[i], last[i] - before[i]])
        .sort((a, b) => Math.abs(b[3]) - Math.abs(a[3])).slice(0, 5);
      rows("movers", movers.map((r) => [r[0], fmt(r[1]), fmt(r[2]), fmt(r[3])]));
    }
  } else {
    text("model-chart-title", `parameter L2 norm over versions (${m.dim} parameters)`);
    chart("chart-model", [{ label: "norm" }], [x, versions.map((v) => v.norm)],
      { xLabel: "model version" });
  }
}

function showProgress(d) {
  const s = d.status, it = d.iteration;
  text("updates-in-iteration", s.updates_in_iteration === null ? withheld : s.updates_in_iteration);
  text("updates-accepted", s.updates_accepted_total === null ? withheld : s.updates_accepted_total);
  text("seconds-open", seconds(it.seconds_open));
  const r = d.round;
  text("seconds-left", r ? seconds(r.seconds_left) : (it.seconds_left === null ? "by count" : seconds(it.seconds_left)));
  $("round").hidden = !r;
  if (r) {
    text("round-number", r.number);
    text("round-seats", r.seated === null ? withheld : `${r.waiting} / ${r.seated} of ${r.clients_per_round}`);
    text("round-reported", r.reported === null ? withheld : r.reported);
    text("round-dropped", r.dropped === null ? withheld :
      (r.dropped.length ? `${r.dropped.length}: ${r.dropped.join(", ")}` : "none"));
  }
  const sa = s.secagg;
  $("secagg").hidden = !sa;
  if (sa) {
    text("secagg-stage", `${sa.round} / ${sa.stage}${sa.reason ? ` (aborted: ${sa.reason})` : ""}`);
    text("secagg-cohort", `${sa.cohort}${sa.excluded.length ? `, excluded ${sa.excluded.join(", ")}` : ""}`);
    const p = sa.previous;
    text("secagg-previous", p ? `${p.round}: ${p.stage}${p.reason ? ` (${p.reason})` : ""}` : "-");
  }
}

function showMetrics(d) {
  const its = d.iterations;
  if (d.counts_withheld) {
    text("metrics-note", "per-branch metrics are withheld under [privacy]: enter the admin token");
    return;
  }
  const names = new Set(), branches = new Set();
  for (const it of its) {
    for (const [b, v] of Object.entries(it.branches || {})) {
      branches.add(b);
      for (const k of Object.keys(v.metrics || {})) names.add(k);
    }
  }
  const select = $("metric-select");
  const options = [...names].sort();
  if (select.options.length !== options.length) {
    select.textContent = "";
    for (const n of options) select.add(new Option(n, n));
    if (options.includes("loss")) select.value = "loss";
  }
  selectedMetric = select.value || options[0];
  if (!selectedMetric) {
    text("metrics-note", "no metrics in the closed iterations yet");
    return;
  }
  text("metrics-note", `${its.length} closed iterations; mean over each branch's updates`);
  const bs = [...branches].sort();
  chart("chart-metrics", bs.map((b) => ({ label: b })),
    [its.map((it) => it.iteration),
      ...bs.map((b) => its.map((it) => {
        const v = ((it.branches || {})[b] || {}).metrics || {};
        return v[selectedMetric] === undefined ? null : v[selectedMetric];
      }))], { xLabel: "iteration" });
}

function showIngest(d, now) {
  const s = d.status;
  text("rejected-total", s.updates_rejected_total === null ? withheld : s.updates_rejected_total);
  text("duplicates-total", s.updates_duplicate_total === null ? withheld : s.updates_duplicate_total);
  const accepted = s.updates_accepted_total;
  if (accepted !== null && previous && previous.accepted !== null && now > previous.t) {
    text("ingest-rate", ((accepted - previous.accepted) / (now - previous.t)).toFixed(1));
  } else {
    text("ingest-rate", accepted === null ? withheld : "-");  // one reading so far
  }
  previous = { t: now, accepted };
  if (d.refusals) {
    const items = [...Object.entries(d.refusals.updates), ...Object.entries(d.refusals.requests)];
    rows("refusals", items.length ? items.map(([k, v]) => [k, String(v)]) : [["none", "0"]]);
  } else {
    rows("refusals", [[withheld, ""]]);
  }
  const its = d.iterations.filter((it) => it.n_updates !== undefined);
  if (its.length) {
    chart("chart-updates", [{ label: "updates per iteration" }],
      [its.map((it) => it.iteration), its.map((it) => it.n_updates)],
      { xLabel: "iteration", height: 150 });
  }
}

function showPrivacy(d) {
  const p = d.status.privacy || {}, ledger = d.privacy;
  $("privacy-off").hidden = !!ledger;
  $("privacy-on").hidden = !ledger;
  if (!ledger) return;
  const devices = p.devices || {};
  text("privacy-epsilon", fmt(p.epsilon));
  text("privacy-budget", `epsilon ${fmt(ledger.budget_epsilon)} over ${ledger.budget_rounds} iterations`);
  text("privacy-max", fmt(devices.max_epsilon));
  text("privacy-at-budget", fmt(devices.at_budget));
  text("privacy-next", ledger.next_cost === null ? "budget spent" : `+${fmt(ledger.next_cost)}`);
  const box = $("spends");
  box.textContent = "";
  if (ledger.spends === null) { box.textContent = withheld; return; }
  const most = Math.max(1, ...ledger.spends.map((b) => b.devices));
  for (const b of ledger.spends) {
    const row = document.createElement("div");
    row.className = "bar";
    const label = document.createElement("span");
    label.className = "label";
    label.textContent = `epsilon ${fmt(b.epsilon, 3)} (${b.iterations} it.)`;
    const fill = document.createElement("span");
    fill.className = "fill";
    fill.style.width = `${(200 * b.devices) / most}px`;
    const n = document.createElement("span");
    n.textContent = `${b.devices} devices${b.epsilon >= ledger.budget_epsilon ? " (at budget)" : ""}`;
    row.append(label, fill, n);
    box.appendChild(row);
  }
}

function showSafeguards(d) {
  const s = d.status, c = d.clipping;
  text("norm-bound", fmt(c.norm_bound));
  text("clip-current", fmt(c.clip_current));
  text("clip-open", c.open ? `${c.open.count - c.open.within} of ${c.open.count}` :
    (d.counts_withheld ? withheld : "-"));
  text("close-failures", s.close_failures_total);
  text("close-error", s.last_close_error ? `${s.last_close_error.error}: ${s.last_close_error.detail}` : "none");
  const its = d.iterations.filter((it) => it.clip && it.clip.count);
  if (its.length) {
    chart("chart-clip", [{ label: "clip rate" }],
      [its.map((it) => it.iteration), its.map((it) => 1 - it.clip.within / it.clip.count)],
      { xLabel: "iteration", height: 150, yRange: [0, 1] });
  }
}

async function poll() {
  try {
    const headers = token ? { Authorization: `Bearer ${token}` } : {};
    const response = await fetch("v1/dashboard", { headers, cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const d = await response.json();
    const now = d.now;
    showAlerts(d.alerts);
    showModel(d);
    showProgress(d);
    showMetrics(d);
    showIngest(d, now);
    showPrivacy(d);
    showSafeguards(d);
    text("connection", `updated ${new Date(now * 1000).toLocaleTimeString()}` +
      (d.counts_withheld ? " (counts withheld under [privacy])" : ""));
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (err) {
    text("connection", `cannot reach the server: ${err.message}`);
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

$("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  token = $("token").value;
  sessionStorage.setItem("fedrank-admin-token", token);
  previous = null;
  $("token").value = "";
});
$("metric-select").addEventListener("change", () => { selectedMetric = $("metric-select").value; });
poll();

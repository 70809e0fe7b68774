// eor's web page: asks over the HTTP front's server-sent events (POST /v1/ask/stream, read with
// fetch so that the bearer token can travel in a header, which EventSource cannot send) and shows
// each reply as it arrives; the second view shows the voter that ships (GET /v1/voter).
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return e;
};
const fmt = (x, digits = 2) => (x === undefined || x === null ? "—" : Number(x).toFixed(digits));
let models = {};  // reader name ("" the default) -> model, from Health when the token allows
let modelsLoaded = Promise.resolve();

function headers() {
  const h = { "content-type": "application/json" };
  const token = $("token").value.trim();
  if (token) h.authorization = `Bearer ${token}`;
  return h;
}

function setState(state) { document.body.dataset.state = state; }

function showError(line) {
  $("error").textContent = line;
  $("error").hidden = false;
  setState("error");
}

async function errorLine(res) {
  let body = {};
  try { body = await res.json(); } catch (e) { /* not JSON: the status alone */ }
  return `${res.status} ${body.status || res.statusText}: ${body.error || "request failed"}`;
}

function request() {
  const body = { question: $("question").value };
  const p = $("min-confidence").value.trim();
  if (p !== "") body.min_confidence = Number(p);
  const r = $("retrievers").value.trim();
  if (r) body.retrievers = r.split(",").map((s) => s.trim()).filter(Boolean);
  const d = $("deadline").value.trim();
  if (d !== "") body.deadline_s = Number(d);
  return body;
}

// ---- the stream ----------------------------------------------------------------------------
let lastLatency = 0;
let controller = null;

async function ask(event) {
  event.preventDefault();
  if (controller) controller.abort();  // a new question ends the last one's stream (its Ask is cancelled)
  controller = new AbortController();
  $("error").hidden = true;
  $("result").hidden = true;
  $("timeline").querySelector("tbody").replaceChildren();
  lastLatency = 0;
  setState("streaming");
  $("ask").disabled = true;
  try {
    const res = await fetch("/v1/ask/stream", { method: "POST", headers: headers(), body: JSON.stringify(request()),
                                                signal: controller.signal });
    if (!res.ok) return showError(await errorLine(res));
    await readEvents(res.body.getReader());
    if (document.body.dataset.state === "streaming") setState("done");
  } catch (e) {
    if (e.name !== "AbortError") showError(`the stream broke: ${e.message}`);
  } finally {
    $("ask").disabled = false;
  }
}

async function readEvents(reader) {
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let kind = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) kind = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trim());
      }
      if (data.length) onEvent(kind, JSON.parse(data.join("\n")));
    }
  }
}

function onEvent(kind, data) {
  if (kind === "error") return showError(`${data.status}: ${data.error}`);
  addTimeline(kind, data);
  showReply(kind, data);
  if (kind === "final") setState("done");
}

function label(kind, reply) {
  if (kind === "preview") return "preview";
  if (kind === "round") return `round ${reply.stopped_at_stage} of ${reply.stages}`;
  return `final (after round ${reply.stopped_at_stage} of ${reply.stages})`;
}

function addTimeline(kind, reply) {
  const took = reply.latency_s - lastLatency;
  lastLatency = reply.latency_s;
  const shown = reply.abstained ? `not sure (${reply.guess})` : reply.answer;
  $("timeline").querySelector("tbody").append(el("tr", { class: `event-${kind}` },
    el("td", {}, label(kind, reply)), el("td", {}, shown || "—"), el("td", {}, fmt(reply.confidence)),
    el("td", {}, `${fmt(reply.latency_s, 1)} s`), el("td", {}, `${fmt(took, 1)} s`),
    el("td", {}, (reply.ran || []).join(", "))));
}

function readerOf(spec) {
  const at = spec.indexOf("~");
  const name = at < 0 ? "" : spec.slice(at + 1);
  return models[name] || (name || "default");
}

function showReply(kind, reply) {
  $("result").hidden = false;
  $("answer-card").classList.toggle("provisional", kind !== "final");
  $("answer-kind").textContent = kind === "final" ? "answer" : `${label(kind, reply)}: provisional`;
  $("answer").textContent = reply.abstained ? "" : reply.answer;
  $("abstained").hidden = !reply.abstained;
  $("guess").textContent = reply.guess || "";
  const p = reply.confidence;
  const fill = $("p-fill");
  fill.style.width = p === undefined ? "0" : `${Math.round(p * 100)}%`;
  fill.className = "fill" + (reply.abstained ? " unsure" : p !== undefined && p < 0.5 ? " low" : "");
  $("p-value").textContent = p === undefined ? `unknown (${reply.confidence_kind})` : `${fmt(p)} (${reply.confidence_kind})`;
  const bar = request().min_confidence;
  $("p-mark").hidden = bar === undefined;
  if (bar !== undefined) $("p-mark").style.left = `${Math.min(bar, 1) * 100}%`;
  $("answer-meta").textContent = `from ${reply.retriever || "no retriever"}; ${fmt(reply.latency_s, 1)} s; ` +
    `voter: ${reply.voter}` + (reply.missing && reply.missing.length ? `; missing: ${reply.missing.join(", ")}` : "");
  showEvidence(reply);
  showCandidates(reply);
}

function showEvidence(reply) {
  $("evidence-of").textContent = reply.retriever ? `behind ${reply.retriever}'s answer` : "";
  const items = (reply.passages || []).map((p) => el("li", {},
    el("div", { class: "src" }, `${p.source} · ${p.title} · ${p.id} · score ${fmt(p.score)}`),
    el("div", {}, p.text.length > 360 ? `${p.text.slice(0, 360)}…` : p.text)));
  if (!items.length && reply.document) items.push(el("li", {}, el("div", { class: "src" }, "the reader's own document"),
                                                  el("div", {}, reply.document)));
  $("evidence").replaceChildren(...items);
}

function showCandidates(reply) {
  $("candidates").querySelector("tbody").replaceChildren(...(reply.candidates || []).map((c) => el("tr",
    { class: c.retriever === reply.retriever ? "winner" : "" },
    el("td", {}, c.retriever), el("td", {}, readerOf(c.retriever)),
    c.error ? el("td", { class: "err" }, `${c.error_kind}: ${c.error}`) : el("td", {}, c.answer),
    el("td", {}, fmt(c.score, 3)), el("td", {}, fmt(c.confidence, 3)))));
}

// ---- what ships ----------------------------------------------------------------------------
async function showShips() {
  $("ships-error").hidden = true;
  await modelsLoaded;
  const res = await fetch("/v1/voter", { headers: headers() });
  if (!res.ok) {
    $("ships-error").textContent = await errorLine(res);
    $("ships-error").hidden = false;
    return;
  }
  const v = await res.json();
  $("voter-label").textContent = `${v.label} (id ${v.id})`;
  const n = v.rounds.length;
  $("rounds").querySelector("tbody").replaceChildren(...v.rounds.map((members, i) => el("tr", {},
    el("td", {}, i + 1), el("td", {}, members.map((s) => `${s} (${readerOf(s)})`).join(", ")),
    el("td", {}, i < n - 1 ? (v.thresholds[i] === null ? "never" : fmt(v.thresholds[i], 3)) : "last round: always"),
    el("td", {}, v.fit_stop_rate.length ? `${Math.round(v.fit_stop_rate[i] * 100)}%` : "—"))));
  $("preview-line").textContent = v.preview.length ?
    `A stream's preview reads ${v.preview.join(", ")} beside round 1: a first answer with its own P(right), never voted after.` : "";
  const images = (urls, none) => (urls.length ? urls.map((u) => el("img", { src: u, alt: u.split("/").pop() }))
                                             : [el("p", { class: "meta" }, none)]);
  $("reliability").replaceChildren(...images(v.files.reliability, "No reliability diagram of this voter in docs/img."));
  const reports = v.files.reports.map((u) => {
    const d = el("details", {}, el("summary", {}, u.split("/").pop()));
    d.addEventListener("toggle", async () => {
      if (d.open && d.children.length === 1) d.append(el("pre", { class: "report" }, await (await fetch(u)).text()));
    });
    return d;
  });
  const plots = v.files.plots.length ? images(v.files.plots, "") :
    reports.length ? [el("p", { class: "meta" }, "No plots of its robustness reports; their tables:")] :
    [el("p", { class: "meta" }, "No robustness reports of this voter in docs/robustness.")];
  $("robustness").replaceChildren(...plots, ...reports);
}

async function loadModels() {
  try {
    const res = await fetch("/v1/health", { headers: headers() });
    if (!res.ok) return;
    for (const r of (await res.json()).readers || []) {
      // an engine's model id is "MODEL:FOLDER:DTYPE", MODEL a name or a path: its name
      models[r.deployment === "Reader" ? "" : r.deployment.replace(/^Reader_/, "")] = r.model.split(":")[0].split("/").pop();
    }
  } catch (e) { /* the names stay "default" / "1.5B" */ }
}

function show(view) {
  for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t.dataset.view === view);
  $("view-ask").hidden = view !== "ask";
  $("view-ships").hidden = view !== "ships";
  if (view === "ships") showShips();
}

$("token").value = sessionStorage.getItem("eor-token") || "";
$("token").addEventListener("change", () => {
  sessionStorage.setItem("eor-token", $("token").value);
  modelsLoaded = loadModels();
});
$("ask-form").addEventListener("submit", ask);
for (const t of document.querySelectorAll(".tab")) t.addEventListener("click", () => show(t.dataset.view));
modelsLoaded = loadModels();
if (location.hash === "#ships") show("ships");

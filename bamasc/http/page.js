// The spend page of `bamasc report` and `/ui`: draws one summary (bamasc/http/spend.py) with Plotly.
// Every text from a trace goes into the page as text (textContent), and into a chart's labels with
// &, < and > written as entities, so a task id or a refusal's reason is shown, never run.
"use strict";

(function () {
  const MICRO = 1e6;
  const FONT = {family: "system-ui, sans-serif", size: 12};
  const CONFIG = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"]};

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, String(value));
    }
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(child === null || child === undefined ? "" : String(child)));
    }
    return node;
  }

  function micro(value) {
    return value === null || value === undefined ? "–" : value.toFixed(2) + " µ$";
  }

  function dollars(value) {
    return "$" + (value / MICRO).toFixed(value >= MICRO ? 2 : 6);
  }

  // A label Plotly reads as its own small HTML: entities are shown as the characters they name.
  function label(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  function layout(title, extra) {
    return Object.assign({title: {text: label(title), font: {size: 14}}, font: FONT, margin: {l: 60, r: 20, t: 40, b: 50},
                          height: 300, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "#fafafa"}, extra || {});
  }

  function draw(id, traces, chartLayout) {
    const node = document.getElementById(id);
    if (!node) return;
    Plotly.react(node, traces, chartLayout, CONFIG);
  }

  function card(id, name, value, text, note) {
    return el("div", {class: "card"}, el("div", {class: "name"}, name),
              el("div", {class: "value", id: id, "data-value": value}, text),
              el("div", {class: "note"}, note || ""));
  }

  function counts(byStatus) {
    const parts = Object.entries(byStatus).map(([status, count]) => status + " " + count);
    return parts.length ? parts.join(", ") : "none";
  }

  function totals(summary) {
    const t = summary.totals;
    const live = summary.live || {};
    const cards = [
      card("total-spent", "spent", t.spent, micro(t.spent), dollars(t.spent)),
      card("total-held", "held", t.held, micro(t.held), "reservations without their call line"),
      card("total-refused", "refused calls", t.refused, String(t.refused), "not sent: a limit had no room"),
      card("total-attempts", "attempts", t.attempts, String(t.attempts), "calls and tool calls made"),
      card("total-tasks", "tasks", t.tasks, String(t.tasks), counts(t.tasks_by_status)),
      card("total-scopes", "proxy scopes", t.scopes, String(t.scopes), counts(t.scopes_by_status)),
      card("total-budgets", "budgets granted", t.budgets, micro(t.budgets), "the tasks' and scopes' own budgets"),
    ];
    if (live.total !== null && live.total !== undefined) {
      cards.push(card("total-left", "total budget left", live.left, micro(live.left), "of " + micro(live.total)));
    }
    for (const window of live.windows || []) {
      cards.push(card(null, "window " + window.window, window.charged, micro(window.charged),
                      "of " + micro(window.budget) + ", " + micro(window.held) + " held, " + micro(window.left) + " left"));
    }
    document.getElementById("totals").replaceChildren(...cards);
    const statuses = el("p", {id: "statuses"}, "tasks: " + counts(t.tasks_by_status) + "; scopes: " + counts(t.scopes_by_status));
    document.getElementById("statuses").replaceWith(statuses);
  }

  function bars(id, title, sums, color) {
    const names = Object.keys(sums);
    const section = document.getElementById(id);
    if (!section) return;
    section.hidden = names.length === 0;
    if (!names.length) return;
    draw(id, [{type: "bar", orientation: "h", x: names.map((name) => sums[name]), y: names.map(label),
               marker: {color: color}, hovertemplate: "%{y}: %{x:.2f} µ$<extra></extra>"}],
         layout(title, {height: Math.max(180, 60 + 24 * names.length), xaxis: {title: {text: "µ$"}},
                        yaxis: {automargin: true, autorange: "reversed"}}));
  }

  // A trace's time (Unix seconds) as Plotly reads a date: UTC, to the millisecond.
  function when(seconds) {
    return new Date(seconds * 1000).toISOString().replace("T", " ").replace("Z", "");
  }

  const WINDOW_COLORS = ["#1f6feb", "#cf222e", "#2da44e", "#8250df", "#bf8700", "#0a7a6a", "#57606a", "#d1242f"];

  function timeline(summary) {
    const line = summary.timeline;
    const timed = line.axis === "time";
    const x = timed ? line.x.map(when) : line.x;
    const traces = [
      {type: "scatter", mode: "lines", name: "spent", x: x, y: line.spent, line: {color: "#1f6feb", shape: "hv"}},
      {type: "scatter", mode: "lines", name: "budgets granted", x: x, y: line.granted,
       line: {color: "#9a6700", dash: "dash", shape: "hv"}},
    ];
    const live = summary.live || {};
    if (live.total !== null && live.total !== undefined && x.length) {
      traces.push({type: "scatter", mode: "lines", name: "total budget", x: [x[0], x[x.length - 1]],
                   y: [live.total, live.total], line: {color: "#cf222e", dash: "dot"}});
    }
    const chart = document.getElementById("chart-timeline");
    if (chart) chart.setAttribute("data-axis", line.axis);
    draw("chart-timeline", traces, layout(timed ? "Spend over time against the budgets"
                                                : "Spend over the trace, line by line, against the budgets",
      {xaxis: timed ? {type: "date", title: {text: "time (UTC)"}} : {title: {text: "money line of the trace"}},
       yaxis: {title: {text: "µ$"}}}));
    document.getElementById("timeline-note").textContent = line.note || "";
    const windows = summary.windows.filter((window) => window.x.length);
    const section = document.getElementById("windows-over-time");
    section.hidden = windows.length === 0;
    if (!windows.length) return;
    const lines = [];
    windows.forEach((window, index) => {
      const color = WINDOW_COLORS[index % WINDOW_COLORS.length];
      const start = window.start !== null && window.start <= window.x[0] ? [window.start] : [];
      lines.push({type: "scatter", mode: "lines", name: label(window.level), legendgroup: String(index),
                  x: start.concat(window.x).map(when), y: start.map(() => 0).concat(window.y),
                  line: {color: color, shape: "hv"}, hovertemplate: "%{x}: %{y:.2f} µ$<extra>" + label(window.level) + "</extra>"});
      if (window.budget !== null && window.start !== null) {
        lines.push({type: "scatter", mode: "lines", name: label(window.level) + " limit", legendgroup: String(index),
                    showlegend: false, x: [when(window.start), when(window.end)], y: [window.budget, window.budget],
                    line: {color: color, dash: "dot"}, hovertemplate: "limit %{y:.2f} µ$<extra>" + label(window.level) + "</extra>"});
      }
    });
    draw("chart-windows", lines, layout("Spend in each key and team window against its limit (dotted)",
      {height: 360, xaxis: {type: "date", title: {text: "time (UTC)"}}, yaxis: {title: {text: "µ$"}},
       legend: {orientation: "h", y: -0.25}}));
  }

  function charts(summary) {
    timeline(summary);
    const ratios = summary.ratios;
    const names = [];
    for (let bin = 0; bin < ratios.bins; bin++) names.push(Math.round(100 * bin / ratios.bins) + "–" + Math.round(100 * (bin + 1) / ratios.bins) + "%");
    names.push("over 100%");
    draw("chart-ratios", [{type: "bar", x: names, y: ratios.counts, marker: {color: names.map((_, i) => i === ratios.bins ? "#cf222e" : "#2da44e")},
                           hovertemplate: "%{x}: %{y} tasks<extra></extra>"}],
         layout("Cost against its bound (a proxy scope: its budget), " + ratios.measured + " measured",
                {xaxis: {title: {text: "share of the bound spent"}}, yaxis: {title: {text: "tasks"}}}));
    bars("chart-model", "Spend by model", summary.by_model, "#8250df");
    bars("chart-tool", "Spend by tool", summary.by_tool, "#bf8700");
    bars("chart-template", "Spend by template", summary.by_template, "#1f6feb");
    bars("chart-key", "Spend by key", summary.by_key, "#0a7a6a");
    bars("chart-team", "Spend by team", summary.by_team, "#57606a");
    const windows = {};
    for (const window of summary.windows) windows[window.level] = window.spent;
    bars("chart-window", "Spend by key and team window", windows, "#9a6700");
  }

  function callTable(calls) {
    const head = el("tr", {}, ...["call", "node", "charged", "reserved", "ms", "error"].map((name) => el("th", {}, name)));
    const rows = calls.map((call) => el("tr", {class: call.refused ? "refused" : ""},
      el("td", {}, (call.kind === "tool" ? "tool " : "") + (call.what || "")), el("td", {}, call.node || ""),
      el("td", {class: "num"}, micro(call.charged)), el("td", {class: "num"}, micro(call.reserved)),
      el("td", {class: "num"}, call.ms.toFixed(1)), el("td", {}, call.refused ? "refused: " + (call.error || "") : call.error || "")));
    return el("table", {class: "calls"}, head, ...rows);
  }

  function taskTable(id, tasks) {
    const head = el("tr", {}, ...["task", "status", "template / key", "spent", "budget", "bound", "seconds", "attempts", "refused"]
      .map((name) => el("th", {}, name)));
    const rows = [];
    for (const task of tasks) {
      rows.push(el("tr", {class: "task"}, el("td", {class: "id"}, task.task_id), el("td", {}, task.status),
        el("td", {}, task.template || task.key || ""), el("td", {class: "num"}, micro(task.spent)),
        el("td", {class: "num"}, micro(task.budget)), el("td", {class: "num"}, micro(task.bound)),
        el("td", {class: "num"}, task.seconds === null ? "–" : task.seconds.toFixed(3)), el("td", {class: "num"}, task.attempts),
        el("td", {class: "num"}, task.refused)));
      rows.push(el("tr", {class: "detail"}, el("td", {colspan: 9},
        el("details", {}, el("summary", {}, task.calls.length + " calls"), callTable(task.calls)))));
    }
    document.getElementById(id).replaceChildren(tasks.length ? el("table", {}, head, ...rows)
      : el("p", {}, "No task to list (a proxy's trace records no durations)."));
  }

  function refusals(summary) {
    const list = summary.refusals;
    const head = el("tr", {}, ...["task or scope", "key", "model", "node", "why"].map((name) => el("th", {}, name)));
    const rows = list.map((item) => el("tr", {class: "refusal"}, el("td", {class: "id"}, item.task_id),
      el("td", {}, item.key || ""), el("td", {}, item.model || ""), el("td", {}, item.node || ""),
      el("td", {class: "why"}, item.why)));
    const more = summary.totals.refused - list.length;
    document.getElementById("refusals").replaceChildren(
      list.length ? el("table", {}, head, ...rows) : el("p", {}, "No call was refused."),
      more > 0 ? el("p", {}, "… and " + more + " earlier refusals (counted above)") : "");
  }

  function render(summary) {
    document.getElementById("sources").textContent = summary.sources.join(", ") || "(no trace yet)";
    const problems = [];
    if (summary.live && summary.live.bad_lines) problems.push(summary.live.bad_lines + " trace lines could not be read");
    if (summary.live && summary.live.note) problems.push(summary.live.note);
    document.getElementById("problems").textContent = problems.join("; ");
    totals(summary);
    charts(summary);
    taskTable("dearest", summary.dearest);
    taskTable("slowest", summary.slowest);
    refusals(summary);
    document.body.setAttribute("data-rendered", String(Number(document.body.getAttribute("data-rendered") || 0) + 1));
  }

  // ---- live: the page polls its server's summary route, with the token kept for this tab only
  const TOKEN = "bamasc-ui-token";

  function token() {
    const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (match) {
      sessionStorage.setItem(TOKEN, decodeURIComponent(match[1]));
      history.replaceState(null, "", location.pathname + location.search);  // not left in the address bar
    }
    return sessionStorage.getItem(TOKEN);
  }

  function ask(message) {
    const form = document.getElementById("login");
    form.hidden = false;
    document.getElementById("login-message").textContent = message;
  }

  async function poll(url) {
    const given = token();
    const headers = given ? {Authorization: "Bearer " + given} : {};
    let answer;
    try {
      answer = await fetch(url, {headers: headers, cache: "no-store", credentials: "omit"});
    } catch (problem) {
      document.getElementById("state").textContent = "server not reachable; retrying";
      return;
    }
    if (answer.status === 401) {
      ask("This server needs its token, or a client key, to show its spend.");
      return "stop";
    }
    const body = await answer.json();
    if (!answer.ok) {
      document.getElementById("state").textContent = (body.error && body.error.message) || ("status " + answer.status);
      return;
    }
    document.getElementById("login").hidden = true;
    document.getElementById("state").textContent = "live, updated " + new Date().toLocaleTimeString();
    render(body);
  }

  function live(url, every) {
    document.getElementById("login").addEventListener("submit", (event) => {
      event.preventDefault();
      sessionStorage.setItem(TOKEN, document.getElementById("login-token").value);
      document.getElementById("login-token").value = "";
      start();
    });
    let timer = null;
    async function start() {
      clearTimeout(timer);
      if ((await poll(url)) !== "stop") timer = setTimeout(start, every);
    }
    start();
  }

  window.addEventListener("DOMContentLoaded", () => {
    const embedded = document.getElementById("bamasc-summary");
    if (embedded) {
      render(JSON.parse(embedded.textContent));
    } else {
      live(document.body.getAttribute("data-summary"), Number(document.body.getAttribute("data-every")) || 2000);
    }
  });
})();

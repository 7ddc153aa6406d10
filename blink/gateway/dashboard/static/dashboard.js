// Blink live dashboard: canvas line charts fed by /dashboard/events (SSE, one snapshot a second).
// No dependencies, so the page works offline; state lives on window.blinkDashboard for tests.
"use strict";
(function () {
  const COLORS = ["#4aa3ff", "#f5b942", "#ff5d6c", "#3ccf91", "#b48cff"];
  const CHARTS = {
    ttft: { series: [["ttft_p50", "p50"], ["ttft_p90", "p90"], ["ttft_p99", "p99"]] },
    itl: { series: [["itl_p50", "p50"], ["itl_p90", "p90"], ["itl_p99", "p99"]] },
    tput: { series: [["rps", "req/s"], ["tps", "tokens/s"]], rightAxis: "tps" },
    engine: { series: [["batch", "batch"], ["kv_pct", "KV %"], ["running", "running"]] },
  };
  const state = { updates: 0, last: null, drawn: {}, source: null };
  window.blinkDashboard = state;

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function draw(canvas, spec, series) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (canvas.width !== w * dpr || canvas.height !== h * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const pad = { l: 46, r: spec.rightAxis ? 46 : 10, t: 18, b: 20 };
    const pw = w - pad.l - pad.r, ph = h - pad.t - pad.b;
    const n = series.t.length;
    const left = spec.series.filter(([k]) => k !== spec.rightAxis);
    const maxOf = (keys) => niceMax(Math.max(0, ...keys.flatMap(([k]) => (series[k] || []).filter((v) => v != null))));
    const lmax = maxOf(left), rmax = spec.rightAxis ? maxOf([[spec.rightAxis]]) : 0;
    ctx.strokeStyle = "#263140"; ctx.fillStyle = "#7d8a99"; ctx.font = "11px system-ui, sans-serif"; ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
      const y = pad.t + ph - (ph * i) / 4;
      ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(pad.l + pw, y); ctx.stroke();
      ctx.textAlign = "right"; ctx.fillText(fmt((lmax * i) / 4), pad.l - 6, y + 4);
      if (spec.rightAxis) { ctx.textAlign = "left"; ctx.fillText(fmt((rmax * i) / 4), pad.l + pw + 6, y + 4); }
    }
    ctx.textAlign = "center";
    for (const ago of [120, 90, 60, 30, 0]) {
      ctx.fillText(ago ? `-${ago}s` : "now", pad.l + pw * (1 - ago / 120), h - 5);
    }
    let points = 0;
    spec.series.forEach(([key, label], i) => {
      const ys = series[key] || [], max = key === spec.rightAxis ? rmax : lmax;
      ctx.strokeStyle = COLORS[i]; ctx.lineWidth = 2; ctx.beginPath();
      let pen = false;
      ys.forEach((v, j) => {
        if (v == null) { pen = false; return; }
        const x = pad.l + (pw * j) / Math.max(1, n - 1), y = pad.t + ph - (ph * Math.min(v, max)) / max;
        if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
        pen = true; points++;
      });
      ctx.stroke();
      ctx.fillStyle = COLORS[i]; ctx.textAlign = "left";
      ctx.fillText(label, pad.l + 8 + i * 70, pad.t - 6);
    });
    return points;
  }

  function fmt(v) {
    if (v >= 1000) return (v / 1000).toFixed(1) + "k";
    return v >= 100 || Number.isInteger(v) ? v.toFixed(0) : v.toFixed(1);
  }

  function bars(el, counts) {
    const entries = Object.entries(counts || {});
    const total = entries.reduce((s, [, v]) => s + v, 0);
    if (!total) { el.innerHTML = '<div class="empty">no data yet</div>'; return; }
    el.innerHTML = entries.sort((a, b) => b[1] - a[1]).map(([k, v]) => {
      const pct = (100 * v) / total;
      return `<div class="row"><span>${esc(k)}</span><div class="bar" style="width:${pct.toFixed(1)}%"></div>` +
        `<span class="num">${pct.toFixed(1)}%</span></div>`;
    }).join("");
  }

  function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }

  function last(xs) { for (let i = xs.length - 1; i >= 0; i--) if (xs[i] != null) return xs[i]; return null; }

  function render(snap) {
    if (snap.disabled) { document.getElementById("conn").textContent = "live stats disabled"; return; }
    const s = snap.series;
    s.kv_pct = s.kv_usage.map((v) => (v == null ? null : 100 * v));
    for (const canvas of document.querySelectorAll("canvas[data-chart]")) {
      const key = canvas.dataset.chart;
      state.drawn[key] = draw(canvas, CHARTS[key], s);
    }
    const t = snap.totals;
    const recent = (xs) => xs.slice(-6, -1).reduce((a, b) => a + b, 0) / 5; // last 5 whole seconds
    document.getElementById("k-req").textContent = t.requests;
    document.getElementById("k-rps").textContent = recent(s.rps).toFixed(1);
    document.getElementById("k-tps").textContent = recent(s.tps).toFixed(0);
    const p99 = last(s.ttft_p99);
    document.getElementById("k-ttft").textContent = p99 == null ? "–" : p99.toFixed(1);
    document.getElementById("k-err").textContent = Object.entries(t.status).filter(([k]) => +k >= 400).reduce((a, [, v]) => a + v, 0);
    bars(document.getElementById("cache"), t.cache);
    bars(document.getElementById("routes"), t.routes);
    const br = Object.entries(t.breakers);
    document.getElementById("breakers").innerHTML = br.length
      ? br.map(([b, st]) => `<span class="${esc(st)}">${esc(b)}: ${esc(st)}</span>`).join("")
      : '<span class="closed">all closed</span>';
    const rows = snap.engines.map((e) => `<tr><td>${esc(e.model)}</td><td>${e.running ?? "–"}</td><td>${e.waiting ?? "–"}</td>` +
      `<td>${e.batch_size ?? "–"}</td><td>${e.kv_usage == null ? "–" : (100 * e.kv_usage).toFixed(1) + "%"}</td>` +
      `<td>${e.prefix_cache_hit_rate == null ? "–" : (100 * e.prefix_cache_hit_rate).toFixed(1) + "%"}</td></tr>`);
    document.getElementById("engines").innerHTML =
      "<tr><th>model</th><th>running</th><th>waiting</th><th>batch</th><th>KV</th><th>prefix hits</th></tr>" + rows.join("");
    savings(t);
    state.last = snap; state.updates++;
  }

  // A features' panel: hidden while the feature is off (its snapshot entry is null).
  function figures(id, data, rows) {
    const panel = document.getElementById("p-" + id);
    panel.hidden = !data;
    if (!data) return;
    document.getElementById(id).innerHTML = rows.map(([label, value]) =>
      `<tr><th>${esc(label)}</th><td>${esc(value)}</td></tr>`).join("");
  }

  function num(v, digits) { return v == null ? "–" : Number(v).toFixed(digits || 0); }

  function savings(t) {
    const p = t.precompute;
    figures("precompute", p, p ? [
      ["jobs run", num(Object.values(p.jobs).reduce((a, b) => a + b, 0))],
      ["entries pre-computed", num(p.entries)],
      ["hits on them", num(p.hits)],
      ["hits per entry", num(p.hits_per_entry, 2)],
      ["tokens spent idle", num(p.tokens_idle)],
      ["budget left (tokens)", num(p.budget_left)],
    ] : []);
    const c = t.compression;
    figures("compression", c, c ? [
      ["requests compressed", num(c.requests.compressed || 0)],
      ["ratio (before / after)", c.ratio == null ? "–" : num(c.ratio, 2) + "×"],
      ["tokens saved", num(c.tokens_saved)],
      ["tokens scored", num(c.tokens_scored)],
    ] : []);
  }

  function live(on, text) {
    document.getElementById("dot").className = on ? "dot live" : "dot";
    document.getElementById("conn").textContent = text;
  }

  function poll() {
    fetch("/dashboard/stats").then((r) => r.json()).then((snap) => { live(true, "polling"); render(snap); })
      .catch(() => live(false, "disconnected")).finally(() => setTimeout(poll, 1000));
  }

  if (window.EventSource) {
    const es = new EventSource("/dashboard/events");
    state.source = es;
    es.onopen = () => live(true, "live");
    es.onerror = () => live(false, "reconnecting…");
    es.onmessage = (ev) => render(JSON.parse(ev.data));
  } else {
    poll();
  }
  window.addEventListener("resize", () => state.last && render(state.last));
})();

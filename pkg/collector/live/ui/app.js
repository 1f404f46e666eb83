// MicroView live view: reads /api/v1/live/segments and /api/v1/stream (Server-Sent Events over
// fetch, so a bearer token can be sent) and draws each series on a canvas, one min/max bar per
// pixel column. window.__mvState holds what was drawn, for tests and for the curious.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const hash = new URLSearchParams(location.hash.replace(/^#/, ''));
  if (hash.get('token')) sessionStorage.setItem('mvToken', hash.get('token'));

  const S = {
    connected: false, seg: null, segLabels: {}, bw: 0, windowMs: 10000, width: 800,
    viewMs: 10000, paused: false, series: {}, states: [], drops: [], ends: [], pods: [],
    drawn: null, lastDataMs: 0, lastDataLocal: 0, frames: 0, events: 0, error: null,
    received: 0,
  };
  window.__mvState = S;
  let abort = null;
  let catalog = null;

  function headers() {
    const t = sessionStorage.getItem('mvToken');
    return t ? { Authorization: 'Bearer ' + t } : {};
  }

  function status(text) { $('status').textContent = text; }

  function note(text) {
    const d = document.createElement('div');
    d.textContent = new Date().toISOString().substr(11, 12) + ' ' + text;
    $('events').prepend(d);
  }

  function labelText(l) {
    return [l.namespace, l.pod, l.container].filter((x) => x).join('/') ||
      Object.entries(l).map(([k, v]) => k + '=' + v).join(',');
  }

  async function loadCatalog() {
    let r;
    try {
      r = await fetch('/api/v1/live/segments', { headers: headers(), cache: 'no-store' });
    } catch (e) { status('cannot reach the collector'); S.error = String(e); return; }
    if (r.status === 401 || r.status === 403) {
      $('token').style.display = 'block';
      status(r.status === 401 ? 'token needed' : 'token not allowed');
      S.error = 'auth ' + r.status;
      return;
    }
    if (!r.ok) { status('catalog: HTTP ' + r.status); return; }
    $('token').style.display = 'none';
    catalog = await r.json();
    S.historyMs = catalog.history_ms;
    for (const o of $('window').options) o.disabled = Number(o.value) > catalog.history_ms;
    renderPods();
    const want = params.get('seg') || hash.get('seg');
    if (want && !S.seg) {
      const m = (params.get('m') || hash.get('m') || '').split(',').filter((x) => x !== '');
      const w = Number(params.get('window_ms') || hash.get('window_ms') || 0);
      if (w) S.windowMs = S.viewMs = w;
      selectPod(want, m.map(Number));
      if (m.length) connect();
    }
  }

  function renderPods() {
    const f = $('filter').value.toLowerCase();
    const ul = $('pods');
    ul.textContent = '';
    S.pods = [];
    for (const s of catalog.segments) {
      const text = labelText(s.labels) || s.id;
      if (f && !text.toLowerCase().includes(f) && !s.id.toLowerCase().includes(f)) continue;
      const li = document.createElement('li');
      li.dataset.seg = s.id;
      li.textContent = text;
      const st = document.createElement('span');
      st.className = 'st';
      st.textContent = s.state;
      li.appendChild(st);
      if (s.id === S.seg) li.className = 'sel';
      li.onclick = () => selectPod(s.id, []);
      ul.appendChild(li);
      S.pods.push({ id: s.id, text: text, state: s.state });
    }
  }

  function selectPod(id, pre) {
    const s = catalog && catalog.segments.find((x) => x.id === id);
    if (!s) { status('no segment ' + id); return; }
    S.seg = id;
    S.segLabels = s.labels;
    $('segname').textContent = labelText(s.labels);
    renderPods();
    const box = $('metrics');
    box.textContent = '';
    s.metrics.forEach((m) => {
      const lab = document.createElement('label');
      const cb = document.createElement('input');
      cb.type = 'checkbox';
      cb.value = m.i;
      cb.checked = pre.includes(m.i);
      lab.appendChild(cb);
      const ls = Object.entries(m.labels).map(([k, v]) => k + '="' + v + '"').join(',');
      lab.appendChild(document.createTextNode(' ' + m.name + (ls ? '{' + ls + '}' : '') +
        ' · ' + m.type));
      box.appendChild(lab);
    });
    $('watch').disabled = false;
  }

  function chosen() {
    return Array.from($('metrics').querySelectorAll('input:checked')).map((c) => Number(c.value))
      .slice(0, catalog ? catalog.max_series_per_stream : 16);
  }

  // ---- The stream ----------------------------------------------------------------------

  async function connect() {
    if (abort) abort.abort();
    const idx = chosen();
    if (!S.seg || !idx.length) return;
    S.series = {};
    S.states = [];
    S.width = Math.max(16, Math.min(4096, Math.round($('charts').clientWidth || 800)));
    if (catalog && S.windowMs > catalog.history_ms) S.windowMs = Math.max(1000, catalog.history_ms);
    S.viewMs = Math.min(S.viewMs, S.windowMs);
    if (!Array.from($('window').options).some((o) => o.value === String(S.windowMs))) {
      const o = document.createElement('option');
      o.value = String(S.windowMs);
      o.textContent = (S.windowMs / 1000) + ' s';
      $('window').appendChild(o);
    }
    $('window').value = String(S.windowMs);
    const q = new URLSearchParams();
    q.set('seg', S.seg);
    idx.forEach((i) => q.append('m', i));
    q.set('width', S.width);
    q.set('window_ms', S.windowMs);
    const ctl = new AbortController();
    abort = ctl;
    let r;
    try {
      r = await fetch('/api/v1/stream?' + q.toString(), { headers: headers(), signal: ctl.signal });
    } catch (e) { status('stream failed'); return; }
    if (r.status === 401 || r.status === 403) {
      $('token').style.display = 'block'; status('token needed'); return;
    }
    if (!r.ok) {
      let why = 'HTTP ' + r.status;
      try { const j = await r.json(); why = j.reason + ': ' + j.error; } catch (e) { /* text */ }
      status('refused: ' + why); note('stream refused: ' + why); S.error = why;
      return;
    }
    S.connected = true;
    status('live');
    const rd = r.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    try {
      for (;;) {
        const { value, done } = await rd.read();
        if (done) break;
        S.received += value.length;
        buf += dec.decode(value, { stream: true });
        let k;
        while ((k = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, k);
          buf = buf.slice(k + 2);
          onBlock(block);
        }
      }
    } catch (e) { if (ctl.signal.aborted) return; }
    S.connected = false;
    if (abort === ctl) status('stream closed');
  }

  function onBlock(block) {
    let ev = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const f = c < 0 ? line : line.slice(0, c);
      const v = c < 0 ? '' : line.slice(c + 1).replace(/^ /, '');
      if (f === 'event') ev = v;
      else if (f === 'data') data.push(v);
    }
    if (!data.length) return;
    let j;
    try { j = JSON.parse(data.join('\n')); } catch (e) { return; }
    S.events++;
    if (ev === 'hello') onHello(j);
    else if (ev === 'data') onData(j);
    else if (ev === 'state') onState(j);
    else if (ev === 'drop') { S.drops.push(j); note('dropped ' + j.lost + ' reads of metric ' + j.i + ' (' + j.reason + ')'); }
    else if (ev === 'end') { S.ends.push(j); note('stream ended: ' + j.reason); status('ended: ' + j.reason); }
  }

  function onHello(h) {
    S.bw = h.bw;
    const box = $('charts');
    box.textContent = '';
    for (const s of h.series) {
      const div = document.createElement('div');
      div.className = 'chart';
      div.dataset.metric = s.i;
      const t = document.createElement('div');
      t.className = 'title';
      const ls = Object.entries(s.labels).map(([k, v]) => k + '="' + v + '"').join(',');
      t.textContent = s.name + (ls ? '{' + ls + '}' : '') + ' · ' +
        (s.type === 'counter' ? 'rate /s per read' : s.type === 'histogram' ? 'p50 / p90 / p99 band' : 'value');
      const val = document.createElement('span');
      val.className = 'val';
      t.appendChild(val);
      const cv = document.createElement('canvas');
      cv.width = S.width;
      cv.height = 120;
      div.appendChild(t);
      div.appendChild(cv);
      let heat = null;
      if (s.type === 'histogram') { // observations per group of buckets, per pixel column
        heat = document.createElement('canvas');
        heat.className = 'heat';
        heat.width = S.width;
        heat.height = 48;
        heat.title = 'heatmap: bins up to ' + (s.bins || []).map((x) => (x === null ? '+Inf' : x)).join(', ');
        div.appendChild(heat);
      }
      box.appendChild(div);
      S.series[s.i] = { i: s.i, name: s.name, type: s.type, labels: s.labels, b: new Map(),
        canvas: cv, heat: heat, bins: s.bins || [], val: val };
    }
    promql();
  }

  function onData(d) {
    if (d.bw !== S.bw) return;
    let latest = 0;
    for (const e of d.s) {
      const s = S.series[e.i];
      if (!s) continue;
      for (const b of e.b) {
        const k = b[0];
        const o = s.b.get(k);
        if (!o) s.b.set(k, b.slice(1));
        else { // merge: the same pixel seen again
          o[0] = mn(o[0], b[1]); o[1] = mx(o[1], b[2]); o[2] |= b[3];
          for (let q = 4; q < Math.min(b.length, 10); q += 2) { o[q - 1] = mn(o[q - 1], b[q]); o[q] = mx(o[q], b[q + 1]); }
          for (let h = 10; h < b.length; h++) o[h - 1] += b[h]; // heatmap counts: only new reads come again
        }
        if (k > latest) latest = k;
        s.last = b[2];
      }
    }
    if (latest) {
      const t = (latest + 1) * S.bw / 1e6;
      if (t > S.lastDataMs) { S.lastDataMs = t; S.lastDataLocal = Date.now(); }
    }
  }
  const mn = (a, b) => (a === null ? b : b === null ? a : Math.min(a, b));
  const mx = (a, b) => (a === null ? b : b === null ? a : Math.max(a, b));

  function onState(s) {
    S.states.push(s);
    while (S.states.length > 4000) S.states.shift();
  }

  // ---- Drawing -----------------------------------------------------------------------------

  function rightEdge() {
    if (!S.lastDataMs) return Date.now();
    return S.lastDataMs + Math.min(1000, Date.now() - S.lastDataLocal);
  }

  function draw() {
    requestAnimationFrame(draw);
    if (S.paused || !S.bw) return;
    const t1 = rightEdge(), t0 = t1 - S.viewMs;
    const drawn = { t0: t0, t1: t1, viewMs: S.viewMs, series: [], markers: [], at: Date.now() };
    const kmin = Math.floor(t0 * 1e6 / S.bw) - 1;
    for (const s of Object.values(S.series)) {
      for (const k of s.b.keys()) if (k * S.bw / 1e6 < t1 - S.windowMs * 2) s.b.delete(k);
      drawn.series.push(drawSeries(s, t0, t1, kmin, drawn));
    }
    drawStates(t0, t1, drawn);
    S.drawn = drawn;
    S.frames++;
  }

  // What was drawn, also as text in the page (#mvstate), so that a browser without a script
  // console (chromium --dump-dom) can be asked for it.
  function exportState() {
    const d = S.drawn;
    const out = {
      connected: S.connected, seg: S.seg, bw: S.bw, windowMs: S.windowMs, events: S.events,
      frames: S.frames, drops: S.drops, ends: S.ends, error: S.error, promql: S.promql,
      pods: S.pods, states: d ? d.states : [], markers: d ? d.markers : [],
      t0: d ? d.t0 : 0, t1: d ? d.t1 : 0,
      series: d ? d.series.map((s) => ({ i: s.i, name: s.name, type: s.type, lo: s.lo, hi: s.hi,
        points: s.points.map((p) => [p.t, p.min, p.max, p.f]) })) : [],
    };
    $('mvstate').textContent = JSON.stringify(out);
  }
  setInterval(exportState, 250);

  function drawSeries(s, t0, t1, kmin, drawn) {
    const cv = s.canvas, W = cv.width, H = cv.height, g = cv.getContext('2d');
    const hist = s.type === 'histogram';
    const pts = [];
    let lo = Infinity, hi = -Infinity;
    for (const [k, b] of s.b) {
      if (k < kmin) continue;
      const t = k * S.bw / 1e6;
      if (t > t1) continue;
      const p = hist ? { t: t, min: b[3], max: b[8], p50: b[4], p90: b[6], p99: b[8], f: b[2], rate: b[1],
        h: b.slice(9, 17) }
        : { t: t, min: b[0], max: b[1], f: b[2] };
      if (p.min === null || p.max === null) continue;
      pts.push(p);
      lo = Math.min(lo, p.min);
      hi = Math.max(hi, p.max);
    }
    pts.sort((a, b) => a.t - b.t);
    g.clearRect(0, 0, W, H);
    if (!pts.length) return { i: s.i, name: s.name, type: s.type, points: [] };
    if (lo > 0 && !hist) lo = 0;
    if (hi === lo) hi = lo + 1;
    const pad = 4;
    const y = (v) => H - pad - (v - lo) / (hi - lo) * (H - 2 * pad);
    const x = (t) => (t - t0) / (t1 - t0) * W;
    const bwpx = Math.max(1, S.bw / 1e6 / (t1 - t0) * W);
    g.fillStyle = '#eef2f6';
    g.fillRect(0, 0, W, H);
    g.strokeStyle = '#ccd3da';
    g.beginPath(); g.moveTo(0, y(lo)); g.lineTo(W, y(lo)); g.stroke();
    for (const p of pts) {
      const px = x(p.t);
      if (hist) {
        g.fillStyle = 'rgba(235,120,40,.35)';
        g.fillRect(px, y(p.p99), bwpx, Math.max(1, y(p.p90) - y(p.p99)));
        g.fillStyle = 'rgba(40,110,220,.55)';
        g.fillRect(px, y(p.p90), bwpx, Math.max(1, y(p.p50) - y(p.p90)));
        g.fillStyle = '#1a4fa0';
        g.fillRect(px, y(p.p50) - 1, bwpx, 2);
      } else {
        g.fillStyle = '#1a66d0';
        g.fillRect(px, y(p.max), bwpx, Math.max(1.5, y(p.min) - y(p.max)));
      }
      if (p.f & 1) {
        g.fillStyle = '#d22';
        g.fillRect(px, 0, Math.max(1, bwpx), 6);
        drawn.markers.push({ i: s.i, t: p.t });
      }
    }
    if (hist && s.heat) drawHeat(s, pts, x, bwpx);
    g.fillStyle = '#333';
    g.font = '10px sans-serif';
    g.fillText(fmt(hi), 2, 10);
    g.fillText(fmt(lo), 2, H - 2);
    s.val.textContent = s.last === undefined || s.last === null ? '' : 'last ' + fmt(s.last);
    return { i: s.i, name: s.name, type: s.type, lo: lo, hi: hi, points: pts };
  }

  function drawHeat(s, pts, x, bwpx) {
    const hg = s.heat.getContext('2d'), W = s.heat.width, H = s.heat.height, n = 8;
    hg.clearRect(0, 0, W, H);
    let top = 0;
    for (const p of pts) for (const c of p.h) top = Math.max(top, c || 0);
    if (!top) return;
    const rh = H / n, lt = Math.log1p(top);
    for (const p of pts) {
      for (let r = 0; r < n; r++) {
        const c = p.h[r] || 0;
        if (!c) continue;
        hg.fillStyle = 'rgba(120,20,160,' + Math.max(0.08, Math.log1p(c) / lt) + ')';
        hg.fillRect(x(p.t), H - (r + 1) * rh, bwpx, rh);
      }
    }
  }

  function fmt(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    const a = Math.abs(v);
    return a >= 1e6 || (a && a < 1e-3) ? v.toExponential(2) : String(Math.round(v * 1000) / 1000);
  }

  function drawStates(t0, t1, drawn) {
    const band = $('stateband');
    band.textContent = '';
    const vis = S.states.filter((s) => s.t >= t0 - 1000 && s.t <= t1);
    drawn.states = vis.map((s) => ({ t: s.t, state: s.state, anomaly: s.anomaly }));
    let prevT = t0;
    for (let i = 0; i < vis.length; i++) {
      const nextT = i + 1 < vis.length ? vis[i + 1].t : t1;
      const sp = document.createElement('span');
      sp.className = vis[i].state;
      sp.dataset.state = vis[i].state;
      sp.title = vis[i].state;
      sp.style.width = (Math.max(0, nextT - Math.max(prevT, vis[i].t)) / (t1 - t0) * 100) + '%';
      band.appendChild(sp);
      prevT = nextT;
    }
    const cv = $('anomaly'), g = cv.getContext('2d');
    cv.width = S.width;
    g.clearRect(0, 0, cv.width, cv.height);
    for (let i = 0; i < vis.length; i++) {
      const a = vis[i].anomaly;
      if (a === null) continue;
      const xa = (vis[i].t - t0) / (t1 - t0) * cv.width;
      const xb = ((i + 1 < vis.length ? vis[i + 1].t : t1) - t0) / (t1 - t0) * cv.width;
      g.fillStyle = 'rgba(210,30,30,' + Math.min(1, Math.max(0.05, a)) + ')';
      g.fillRect(xa, 0, Math.max(1, xb - xa), cv.height);
    }
  }

  // ---- Controls --------------------------------------------------------------------------------

  function promql() {
    const sel = Object.values(S.series)[0];
    if (!sel) return;
    const lab = {};
    for (const k of ['namespace', 'pod', 'container']) if (S.segLabels[k]) lab[k] = S.segLabels[k];
    Object.assign(lab, sel.labels);
    const m = Object.entries(lab).map(([k, v]) => k + '="' + String(v).replace(/["\\]/g, '\\$&') + '"').join(',');
    let q;
    if (sel.type === 'counter') q = 'rate(' + sel.name + '{' + m + '}[1m])';
    else if (sel.type === 'histogram') q = 'histogram_quantile(0.99, sum by (le) (rate(' + sel.name + '_bucket{' + m + '}[1m])))';
    else q = sel.name + '{' + m + '}';
    $('promql').value = q;
    S.promql = q;
  }

  $('filter').oninput = () => catalog && renderPods();
  $('watch').onclick = () => connect();
  $('pause').onclick = () => {
    S.paused = !S.paused;
    $('pause').textContent = S.paused ? 'Resume' : 'Pause';
  };
  $('window').onchange = () => { S.windowMs = S.viewMs = Number($('window').value); connect(); };
  $('zoomin').onclick = () => { S.viewMs = Math.max(200, S.viewMs / 2); };
  $('zoomout').onclick = () => { S.viewMs = Math.min(S.windowMs, S.viewMs * 2); };
  $('charts').addEventListener('wheel', (e) => {
    e.preventDefault();
    S.viewMs = Math.max(200, Math.min(S.windowMs, S.viewMs * (e.deltaY > 0 ? 1.25 : 0.8)));
  }, { passive: false });
  $('copyq').onclick = () => {
    promql();
    $('promql').select();
    if (navigator.clipboard) navigator.clipboard.writeText($('promql').value).catch(() => {});
  };
  $('tokenbtn').onclick = () => {
    sessionStorage.setItem('mvToken', $('tokenin').value.trim());
    loadCatalog();
  };
  setInterval(() => { if (catalog) loadCatalog(); }, 10000);
  loadCatalog();
  requestAnimationFrame(draw);
})();

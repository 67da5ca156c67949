// The VRAM charts: one panel (both lenses, its own series) per device that sends vram_update,
// keyed by worker and device (Note [one chart per device]); the events marked on all of them.
import {clock, num, obj, str} from './format.js';
import {MAX_WINDOW_SEC} from './vram_chart.js';
import {VramPanel} from './vram_panel.js';

// Note [one chart per device]: behind `serve --queue`, every worker's vram_update carries its
// `worker` id and `device` name; each (worker, device) gets a panel, added when its first update
// arrives. A single server's updates carry no worker: one panel, untitled, as before. A worker
// that stops is marked stale once it has sent nothing for STALE_MS *and* its heartbeat is gone
// from /headroom/workers (an idle worker sends only on change, so silence alone proves nothing),
// and removed STALE_REMOVE_MS later; an update brings it back.
const STALE_MS = 10_000;
const STALE_REMOVE_MS = 120_000;
const LEVEL_RANK = {ok: 0, warning: 1, danger: 2};

export function vramKey(d) {
  const worker = str(d.worker);
  return worker ? `${worker} ${str(d.device)}` : '';
}

export class VramBoard {
  // `container`: where panels go; `empty`: shown while there is none.
  constructor(container, empty) {
    this.container = container;
    this.empty = empty;
    this.panels = new Map();  // key -> VramPanel, in title order
    this.marks = {items: []};  // {t (sec), kind, text}
    this.windowSec = 300;
    this.liveState = true;
    this.heartbeats = null;  // worker id -> heartbeat record, from /headroom/workers
  }

  // Whether the updates come from workers (serve --queue), not from this server.
  get distributed() {
    for (const key of this.panels.keys()) if (key !== '') return true;
    return false;
  }

  // The first panel's chart (the only one on a single server), for the console and web/tests/.
  primary() {
    const first = this.panels.values().next().value;
    return first ? first.chart : null;
  }

  push(d) {
    const panel = this.panelFor(d);
    panel.push(d, Date.now());
    return panel;
  }

  panelFor(d) {
    const key = vramKey(d);
    let panel = this.panels.get(key);
    if (panel) return panel;
    panel = new VramPanel(key, d, this.marks);
    panel.chart.setWindow(this.windowSec);
    panel.chart.live = this.liveState;
    this.panels.set(key, panel);
    this.place();
    return panel;
  }

  // Panels sorted by title, so that a worker's chart keeps its place across reloads.
  place() {
    const sorted = [...this.panels.values()].sort((a, b) => a.title.localeCompare(b.title));
    this.panels = new Map(sorted.map((p) => [p.key, p]));
    this.container.replaceChildren(...sorted.map((p) => p.el));
    this.container.dataset.count = String(sorted.length);
    this.empty.hidden = sorted.length > 0;
    for (const p of sorted) p.chart.resize();
  }

  remove(panel) {
    panel.destroy();
    this.panels.delete(panel.key);
    this.place();
  }

  set live(v) {
    this.liveState = v;
    for (const p of this.panels.values()) p.chart.live = v;
  }

  gap() {
    this.liveState = false;
    for (const p of this.panels.values()) p.chart.gap();
  }

  setWindow(sec) {
    this.windowSec = sec;
    for (const p of this.panels.values()) p.chart.setWindow(sec);
  }

  redraw() {
    this.staleCheck(Date.now());
    for (const p of this.panels.values()) p.chart.redraw();
  }

  resize() {
    for (const p of this.panels.values()) p.chart.resize();
  }

  // The heartbeat records of GET /headroom/workers (polled in distributed mode).
  workersSeen(records) {
    this.heartbeats = new Map();
    for (const w of records) if (str(obj(w).id)) this.heartbeats.set(w.id, w);
    this.staleCheck(Date.now());
  }

  // The prompt id `worker` runs, as its last heartbeat said, or null.
  runningOn(worker) {
    const w = this.heartbeats && this.heartbeats.get(worker);
    return w ? str(w.running) || null : null;
  }

  staleCheck(nowMs) {
    if (!this.heartbeats) return;  // single server, or not known yet
    for (const p of [...this.panels.values()]) {
      if (!p.worker) continue;
      const gone = !this.heartbeats.has(p.worker) && nowMs - p.lastMs > STALE_MS;
      if (!gone) p.setStale(null);
      else if (!p.stale) p.setStale(nowMs);
      else if (nowMs - p.staleSince > STALE_REMOVE_MS) this.remove(p);
    }
  }

  livePanels() {
    return [...this.panels.values()].filter((p) => !p.stale);
  }

  // The worst level of the live panels and the (first) panel at it.
  worst() {
    let best = {level: 'ok', panel: null};
    for (const p of this.livePanels()) {
      if (!best.panel || LEVEL_RANK[p.level] > LEVEL_RANK[best.level]) best = {level: p.level, panel: p};
    }
    return best;
  }

  // The largest budget of the live devices (null: one is unlimited, or none is known): a queued
  // job runs on a device that fits it, so plans are judged against the largest.
  budget() {
    let max = null;
    for (const p of this.livePanels()) {
      const b = num(obj(p.last).budget);
      if (b === null) return null;
      max = Math.max(max ?? 0, b);
    }
    return max;
  }

  mark(kind, text, tMs = Date.now()) {
    const items = this.marks.items;
    items.push({t: tMs / 1000, kind, text});
    const cutoff = Date.now() / 1000 - MAX_WINDOW_SEC;
    while (items.length && items[0].t < cutoff) items.shift();
  }

  // The events inside the window, newest first, for the list under the charts.
  recentEvents(limit) {
    const from = Date.now() / 1000 - this.windowSec;
    return this.marks.items
      .filter((e) => e.t >= from)
      .slice(-limit)
      .reverse()
      .map((e) => ({...e, time: clock(e.t * 1000)}));
  }
}

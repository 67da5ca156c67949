// One device's live VRAM chart: two uPlot charts on one time axis, one per lens. Allocator level:
// the allocator's segments stacked, with the budget and the warning and danger levels. Driver
// level: what the driver (or the OS, on the CPU) reports, as lines. Events (shared by every
// device's chart, vram_board.js) are marked on both.
import uPlot from './uPlot.esm.js';
import {bytes, clock} from './format.js';
import {DRIVER_LINES, SEGMENTS, VramSeries} from './vram_series.js';

const SEGMENT_COLORS = {
  context: '#5b6573',
  weights: '#3b82f6',
  activations: '#a855f7',
  staging: '#14b8a6',
  other: '#b7791f',
};
const DRIVER_COLORS = {
  used: '#e5e7eb',
  this_process: '#fb923c',
  other_processes: '#f472b6',
  total: '#6b7280',
};
export const EVENT_COLORS = {
  job: '#60a5fa',
  done: '#34d399',
  failed: '#f87171',
  memory: '#c084fc',
  oom: '#f87171',
  held: '#fbbf24',
  levels: '#fbbf24',
};

export const MAX_WINDOW_SEC = 15 * 60;
const HEIGHT_ALLOC = 230;
const HEIGHT_DRIVER = 150;

// Axis steps in binary units, so that ticks read "4 MiB, 8 MiB" rather than "4.2 MB".
const BYTE_INCRS = [];
for (let k = 0; k < 50; k += 1) BYTE_INCRS.push(2 ** k, 3 * 2 ** k, 5 * 2 ** k);
BYTE_INCRS.sort((a, b) => a - b);

function byteAxis() {
  return {
    stroke: '#9ca3af',
    grid: {stroke: 'rgba(148,163,184,0.12)', width: 1},
    ticks: {stroke: 'rgba(148,163,184,0.25)', width: 1},
    incrs: BYTE_INCRS,
    size: 70,
    values: (u, splits) => splits.map((v) => bytes(v, v < 10 * 2 ** 30 ? 1 : 0)),
  };
}

function timeAxis() {
  return {
    stroke: '#9ca3af',
    grid: {stroke: 'rgba(148,163,184,0.08)', width: 1},
    ticks: {stroke: 'rgba(148,163,184,0.25)', width: 1},
    space: 70,
    values: (u, splits) => splits.map((v) => clock(v * 1000)),
  };
}

export class VramChart {
  // `marks.items`: the events to mark, [{t (sec), kind, text}], shared with the other charts.
  constructor(allocEl, driverEl, marks) {
    this.series = new VramSeries(MAX_WINDOW_SEC);
    this.windowSec = 300;
    this.marks = marks;
    this.live = true;  // false while disconnected: the lines end where the data ends
    this.allocEl = allocEl;
    this.driverEl = driverEl;
    // Every device's charts share one cursor: the same moment on all of them.
    const sync = uPlot.sync('vram');
    this.alloc = new uPlot(this.allocOptions(sync), this.series.allocatorData(null), allocEl);
    this.driver = new uPlot(this.driverOptions(sync), this.series.driverData(null), driverEl);
    this.observer = new ResizeObserver(() => this.resize());
    this.observer.observe(allocEl);
    this.resize();
  }

  destroy() {
    this.observer.disconnect();
    this.alloc.destroy();
    this.driver.destroy();
  }

  setWindow(sec) {
    this.windowSec = Math.max(30, Math.min(MAX_WINDOW_SEC, sec));
    this.redraw();
  }

  push(d) {
    this.series.push(Date.now() / 1000, d);
  }

  gap() {
    this.series.gap(Date.now() / 1000);
    this.live = false;
  }

  redraw() {
    const now = Date.now() / 1000;
    const extend = this.live ? now : null;
    this.alloc.setData(this.series.allocatorData(extend), false);
    this.driver.setData(this.series.driverData(extend), false);
    for (const u of [this.alloc, this.driver]) {
      u.setScale('x', {min: now - this.windowSec, max: now});
      if (u.cursor.idx === null || u.cursor.idx === undefined) u.setLegend({idx: null});
    }
  }

  // The last row received (a gap row while disconnected): what the legend shows when the cursor
  // is not on the chart.
  lastRow() {
    return this.series.t.length ? this.series.t.length - 1 : null;
  }

  legendValue(u, v, si, i) {
    if (i !== null && i !== undefined) return bytes(v);
    const last = this.lastRow();
    return bytes(last === null ? null : u.data[si][last]);
  }

  resize() {
    const w = Math.max(320, Math.floor(this.allocEl.clientWidth));
    this.alloc.setSize({width: w, height: HEIGHT_ALLOC});
    this.driver.setSize({width: w, height: HEIGHT_DRIVER});
  }

  // The y range: from zero to a little above the largest value, the budget included.
  static yRange(u, min, max) {
    const top = Math.max(max || 0, 1024 * 1024);
    return [0, top * 1.08];
  }

  allocOptions(sync) {
    const series = [{}];
    for (let top = SEGMENTS.length; top >= 1; top -= 1) {
      const seg = SEGMENTS[top - 1];
      series.push({
        label: seg.label,
        stroke: SEGMENT_COLORS[seg.key],
        fill: SEGMENT_COLORS[seg.key] + 'cc',
        width: 1,
        points: {show: false},
        value: (u, v, si, i) => bytes(this.series.segmentAt(seg.key, i ?? this.lastRow())),
      });
    }
    // Levels change in steps (a POST /headroom/levels, a job's lowered budget), never gradually.
    const stepped = uPlot.paths.stepped({align: 1});
    const line = (label, stroke, dash, width = 1.5) => ({
      label,
      stroke,
      dash,
      width,
      paths: stepped,
      points: {show: false},
      value: (u, v, si, i) => this.legendValue(u, v, si, i),
    });
    series.push(line('budget', '#e5e7eb', [6, 4]));
    series.push(line('job budget (lowered)', '#93c5fd', [2, 3]));
    series.push(line('warning', '#f59e0b', [4, 4]));
    series.push(line('danger', '#ef4444', [4, 4]));
    return this.baseOptions(sync, series, HEIGHT_ALLOC);
  }

  driverOptions(sync) {
    const series = [{}];
    for (const d of DRIVER_LINES) {
      series.push({
        label: d.label,
        stroke: DRIVER_COLORS[d.key],
        width: d.key === 'used' ? 2 : 1.5,
        dash: d.key === 'total' ? [6, 4] : undefined,
        show: d.key !== 'total',  // the device total dwarfs the rest; a click on it shows it
        points: {show: false},
        value: (u, v, si, i) => this.legendValue(u, v, si, i),
      });
    }
    return this.baseOptions(sync, series, HEIGHT_DRIVER);
  }

  baseOptions(sync, series, height) {
    series[0] = {label: 'time', value: (u, v) => (v === null || v === undefined ? 'latest' : clock(v * 1000))};
    return {
      width: 800,
      height,
      series,
      legend: {live: true},
      cursor: {sync: {key: sync.key}, points: {show: false}, drag: {x: false, y: false}},
      scales: {x: {time: true, auto: false}, y: {range: VramChart.yRange}},
      axes: [timeAxis(), byteAxis()],
      hooks: {draw: [(u) => this.drawEvents(u)]},
    };
  }

  // Vertical markers at each event's time with a small flag at the top.
  drawEvents(u) {
    const ctx = u.ctx;
    const {top, height, left, width} = u.bbox;
    ctx.save();
    for (const e of this.marks.items) {
      const x = Math.round(u.valToPos(e.t, 'x', true));
      if (x < left || x > left + width) continue;
      ctx.strokeStyle = EVENT_COLORS[e.kind] || '#9ca3af';
      ctx.fillStyle = ctx.strokeStyle;
      ctx.lineWidth = 1 * devicePixelRatio;
      ctx.setLineDash([3 * devicePixelRatio, 3 * devicePixelRatio]);
      ctx.beginPath();
      ctx.moveTo(x + 0.5, top);
      ctx.lineTo(x + 0.5, top + height);
      ctx.stroke();
      ctx.setLineDash([]);
      const s = 5 * devicePixelRatio;
      ctx.beginPath();
      ctx.moveTo(x - s, top);
      ctx.lineTo(x + s, top);
      ctx.lineTo(x, top + s * 1.4);
      ctx.closePath();
      ctx.fill();
    }
    ctx.restore();
  }
}

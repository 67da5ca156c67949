// The chart's data: one row per vram_update, kept for the longest window the page offers, in
// uPlot's column layout. The allocator's segments are stacked here (Note [stacked segments]).
import {num, obj} from './format.js';

export const SEGMENTS = [
  // bottom of the stack first
  {key: 'context', label: 'context + overhead'},
  {key: 'weights', label: 'resident weights'},
  {key: 'activations', label: 'activations'},
  {key: 'staging', label: 'staging'},
  {key: 'other', label: 'other'},
];

export const DRIVER_LINES = [
  {key: 'used', label: 'total used'},
  {key: 'this_process', label: 'this process'},
  {key: 'other_processes', label: 'other processes'},
  {key: 'total', label: 'device total'},
];

const LEVELS = ['budget', 'job_budget', 'warning', 'danger'];

export class VramSeries {
  constructor(keepSec) {
    this.keepSec = keepSec;
    this.t = [];
    this.seg = Object.fromEntries(SEGMENTS.map((s) => [s.key, []]));
    this.drv = Object.fromEntries(DRIVER_LINES.map((s) => [s.key, []]));
    this.lvl = Object.fromEntries(LEVELS.map((k) => [k, []]));
    this.last = null;  // the last vram_update's data
  }

  // One vram_update received at `tSec` (seconds since the epoch).
  push(tSec, d) {
    const a = obj(d.allocator);
    const drv = obj(d.driver);
    this.t.push(tSec);
    for (const s of SEGMENTS) this.seg[s.key].push(num(a[s.key]));
    // Where per-process numbers were not measured they are unknown, not zero.
    const perProcess = drv.per_process !== false;
    for (const s of DRIVER_LINES) {
      const v = num(drv[s.key]);
      const split = s.key === 'this_process' || s.key === 'other_processes';
      this.drv[s.key].push(split && !perProcess ? null : v);
    }
    for (const k of LEVELS) this.lvl[k].push(num(d[k]));
    this.last = d;
    this.prune(tSec);
  }

  // A break in the lines (the connection dropped): uPlot draws nothing across nulls.
  gap(tSec) {
    if (!this.t.length || this.lastIsGap()) return;
    this.t.push(tSec);
    for (const col of this.columns()) col.push(null);
    this.last = null;
  }

  lastIsGap() {
    const n = this.t.length;
    return n > 0 && this.seg.context[n - 1] === null && this.drv.used[n - 1] === null;
  }

  columns() {
    return [...Object.values(this.seg), ...Object.values(this.drv), ...Object.values(this.lvl)];
  }

  prune(nowSec) {
    let drop = 0;
    while (drop < this.t.length && this.t[drop] < nowSec - this.keepSec) drop += 1;
    if (drop === 0) return;
    this.t.splice(0, drop);
    for (const col of this.columns()) col.splice(0, drop);
  }

  // Note [stacked segments]: uPlot draws series in order, so the stack is given top first as
  // cumulative sums (everything, then everything but "other", ...), each filled down to zero
  // over the one before. The legend shows each segment's own bytes from `seg`.
  // `extendTo`: repeat the last row at that time (the server sends idle updates only on change,
  // so the last values hold until now).
  allocatorData(extendTo) {
    const t = this.withNow(this.t, extendTo);
    const n = this.t.length;
    const stacks = [];
    for (let top = SEGMENTS.length; top >= 1; top -= 1) {
      const col = new Array(n);
      for (let i = 0; i < n; i += 1) {
        let sum = 0;
        let any = false;
        for (let s = 0; s < top; s += 1) {
          const v = this.seg[SEGMENTS[s].key][i];
          if (v !== null) {
            sum += v;
            any = true;
          }
        }
        col[i] = any ? sum : null;
      }
      stacks.push(this.withNow(col, extendTo));
    }
    const levels = LEVELS.map((k) => this.withNow(this.lvl[k], extendTo));
    return [t, ...stacks, ...levels];
  }

  driverData(extendTo) {
    const t = this.withNow(this.t, extendTo);
    return [t, ...DRIVER_LINES.map((s) => this.withNow(this.drv[s.key], extendTo))];
  }

  withNow(col, extendTo) {
    if (extendTo === null || !this.t.length || this.lastIsGap()) return col;
    if (extendTo <= this.t[this.t.length - 1]) return col;
    return col === this.t ? [...col, extendTo] : [...col, col[col.length - 1]];
  }

  // The segment's own bytes at row `i` (null: unknown).
  segmentAt(key, i) {
    const col = this.seg[key];
    // The cursor may be on the row repeated at "now" (withNow), one past the data.
    if (i === null || i === undefined || i >= col.length) i = col.length - 1;
    return i >= 0 && i < col.length ? col[i] : null;
  }
}

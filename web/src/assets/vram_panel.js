// One device's place on the page: its title (worker and device; none for a single server), the
// latest numbers in both lenses with the running node, its level colour, and its chart.
import {el} from './dom.js';
import {bytes, clock, num, obj, str} from './format.js';
import {VramChart} from './vram_chart.js';

// 'ok', 'warning' or 'danger': allocator-level bytes against the warning and danger levels (both
// fractions of the budget, allocator level).
export function memoryLevel(d) {
  const total = num(obj(d.allocator).total);
  const warning = num(d.warning);
  const danger = num(d.danger);
  if (total !== null && danger !== null && total >= danger) return 'danger';
  if (total !== null && warning !== null && total >= warning) return 'warning';
  return 'ok';
}

export class VramPanel {
  // `key`: '' for a single server's updates, else the worker and device (vram_board.js).
  constructor(key, d, marks) {
    this.key = key;
    this.worker = str(d.worker);
    this.device = str(d.device);
    this.last = null;  // the last vram_update's data
    this.lastMs = 0;
    this.level = 'ok';
    this.staleSince = null;  // ms since the epoch when it was marked stale
    this.el = this.build();
    this.chart = new VramChart(this.part('.chart-alloc'), this.part('.chart-driver'), marks);
  }

  get title() {
    return this.worker ? `${this.worker} · ${this.device || 'unknown device'}` : '';
  }

  get stale() {
    return this.staleSince !== null;
  }

  part(selector) {
    return this.el.querySelector(selector);
  }

  build() {
    const strong = (cls) => el('strong', {class: cls}, '–');
    return el('section', {class: 'vram-panel', dataset: {key: this.key, level: 'ok', stale: 'false'}},
      el('div', {class: 'panel-head'},
        this.worker ? el('h3', {class: 'panel-title'}, this.title) : null,
        el('span', {class: 'panel-state', hidden: true}),
        el('div', {class: 'now'},
          el('span', {}, el('span', {class: 'muted'}, 'allocator '), strong('now-alloc')),
          el('span', {}, el('span', {class: 'muted'}, 'driver '), strong('now-driver')),
          el('span', {}, el('span', {class: 'muted'}, 'node '), strong('now-node')))),
      el('div', {class: 'lens'},
        el('h3', {}, 'Allocator level ', el('span', {class: 'lens-sub'},
          "bytes headroom's allocator holds, stacked by segment, against the budget")),
        el('div', {class: 'chart chart-alloc'})),
      el('div', {class: 'lens'},
        el('h3', {}, 'Driver level ', el('span', {class: 'lens-sub driver-source'},
          'what the driver reports for the whole device')),
        el('div', {class: 'chart chart-driver'})));
  }

  push(d, nowMs) {
    this.chart.push(d);
    this.last = d;
    this.lastMs = nowMs;
    this.setStale(null);
    this.show(d);
  }

  show(d) {
    const a = obj(d.allocator);
    const drv = obj(d.driver);
    const budget = num(d.budget);
    this.level = memoryLevel(d);
    this.el.dataset.level = this.level;
    this.part('.now-alloc').textContent = `${bytes(a.total)}${budget ? ` of ${bytes(budget)}` : ' (no budget)'}`;
    this.part('.now-driver').textContent = `${bytes(drv.used)} of ${bytes(drv.total)}`;
    this.part('.driver-source').textContent = str(drv.source) ? `source: ${drv.source}` : 'source unknown';
    this.part('.now-node').textContent = str(d.node) || 'idle';
  }

  // `sinceMs`: when it stopped (shown), or null: it sends again.
  setStale(sinceMs) {
    if ((sinceMs !== null) === this.stale) return;
    this.staleSince = sinceMs;
    this.el.dataset.stale = String(this.stale);
    const state = this.part('.panel-state');
    state.hidden = !this.stale;
    state.textContent = this.stale ? `stopped · last update ${clock(this.lastMs)}` : '';
  }

  destroy() {
    this.chart.destroy();
    this.el.remove();
  }
}

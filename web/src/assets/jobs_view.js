// The queue and history cards: the running job with its nodes (planned and measured peak per
// node, the sampler's progress), pending jobs with their plan's verdict, and finished jobs with
// outcome, peak, time and thumbnails. Buttons call ComfyUI's /interrupt, /queue and /history.
import {api, viewUrl} from './api.js';
import {el, fill} from './dom.js';
import {arr, bytes, clock, duration, num, obj, shortId, str} from './format.js';
import {planVerdict} from './plan_verdict.js';

function badge(kind, text, title) {
  return el('span', {class: `badge badge-${kind}`, title}, text);
}

function emptyRow(text) {
  return el('div', {class: 'empty'}, text);
}

// A bar of `value` against `scale` (both bytes); `over` colours it when value > limit.
function peakBar(value, scale, limit) {
  const v = num(value);
  const s = num(scale);
  if (v === null || !s) return el('div', {class: 'bar'});
  const over = num(limit) !== null && v > limit;
  return el('div', {class: 'bar'},
    el('div', {class: `bar-fill${over ? ' bar-over' : ''}`, style: {width: `${Math.min(100, (100 * v) / s)}%`}}));
}

export class JobsView {
  constructor({running, pending, history, plans, onError}) {
    this.runningEl = running;
    this.pendingEl = pending;
    this.historyEl = history;
    this.plans = plans;  // PlanCache
    this.onError = onError;
    this.historySig = '';
  }

  // The head (with the Interrupt button) is made once per job and the body again only when
  // what it shows changes, so that a click is never lost to a re-render.
  renderRunning(job, live) {
    if (!job) {
      this.runningId = null;
      this.runningSig = '';
      fill(this.runningEl, emptyRow('Nothing is running.'));
      return;
    }
    const plan = this.plans.get(job.promptId);
    if (this.runningId !== job.promptId) {
      this.runningId = job.promptId;
      this.runningSig = '';
      this.elapsedEl = el('span', {class: 'muted'});
      this.planPeakEl = el('span', {class: 'muted'});
      this.runningBody = el('div');
      fill(this.runningEl,
        el('div', {class: 'job-head'},
          el('div', {},
            el('span', {class: 'mono strong', title: job.promptId}, shortId(job.promptId)),
            el('span', {class: 'muted'}, ` #${job.number ?? '?'}`), this.elapsedEl, this.planPeakEl),
          el('button', {class: 'btn btn-danger', id: 'interrupt-btn', onclick: () => this.interrupt(job.promptId)}, 'Interrupt')),
        this.runningBody);
    }
    this.elapsedEl.textContent = live && live.startMs ? ` · running ${duration(Date.now() - live.startMs)}` : '';
    const own = live ? live.plannedPeak : null;
    this.planPeakEl.textContent = own !== null
      ? ` · planned peak ${bytes(own)} (lowered to the warning level)`
      : plan ? ` · planned peak ${bytes(obj(plan).peak)}` : '';
    const model = this.runningModel(job, live, plan);
    const sig = JSON.stringify(model);
    if (sig === this.runningSig) return;
    this.runningSig = sig;
    fill(this.runningBody, this.runningBodyOf(model));
  }

  // What the running job's body shows, as plain data.
  runningModel(job, live, plan) {
    const planNodes = arr(obj(plan).nodes).map(obj);
    const order = planNodes.length ? planNodes.map((n) => str(n.node_id)) : Object.keys(job.prompt);
    const byId = new Map(planNodes.map((n) => [str(n.node_id), n]));
    const liveNodes = live ? live.nodes : new Map();
    for (const id of liveNodes.keys()) if (!order.includes(id)) order.push(id);
    const progress = live && live.progress ? live.progress : null;
    const rows = order.map((id) => {
      const n = liveNodes.get(id) || {};
      const p = byId.get(id) || {};
      const step = n.state === 'running' && progress && progress.node === id;
      return {
        id,
        cls: str(p.class_type) || str(obj(job.prompt[id]).class_type),
        state: n.state || 'waiting',
        stateText: step ? `step ${progress.value}/${progress.max}` : n.state || 'waiting',
        // The job's own plan (vram_update, headroom_node) first: it may run with a lowered budget.
        planned: num(n.planned) ?? num(p.peak),
        measured: num(n.measured),
      };
    });
    const scale = Math.max(num(obj(plan).peak) || 0, ...rows.map((r) => r.measured || 0), ...rows.map((r) => r.planned || 0), 1);
    return {rows, scale, progress, preview: live ? live.previewUrl : null};
  }

  runningBodyOf(m) {
    const pct = m.progress && m.progress.max ? (100 * m.progress.value) / m.progress.max : 0;
    return [
      el('div', {class: 'progress', title: 'sampler progress'},
        el('div', {class: 'progress-fill', id: 'sampler-progress', style: {width: `${pct}%`}}),
        el('span', {class: 'progress-label'}, m.progress ? `sampler step ${m.progress.value} of ${m.progress.max}` : 'sampler not started')),
      m.preview ? el('img', {class: 'preview', src: m.preview, alt: 'sampler preview'}) : null,
      el('table', {class: 'table nodes'},
        el('thead', {}, el('tr', {},
          el('th', {}, 'node'), el('th', {}, 'class'), el('th', {}, 'state'),
          el('th', {class: 'num'}, 'planned peak'), el('th', {class: 'num'}, 'measured peak'), el('th', {}, ''))),
        el('tbody', {}, m.rows.map((r) => el('tr', {class: `node-${r.state}`},
          el('td', {class: 'mono'}, r.id),
          el('td', {}, r.cls),
          el('td', {}, r.stateText),
          el('td', {class: 'num'}, bytes(r.planned)),
          el('td', {class: 'num'}, bytes(r.measured)),
          el('td', {class: 'bar-cell'}, peakBar(r.measured ?? r.planned, m.scale, r.planned)))))),
    ];
  }

  renderPending(items) {
    const sig = JSON.stringify(items.map((j) => [j.promptId, j.number, this.plans.get(j.promptId) ? 1 : 0, this.plans.error(j.promptId)]));
    if (sig === this.pendingSig) return;
    this.pendingSig = sig;
    if (!items.length) {
      fill(this.pendingEl, emptyRow('No jobs waiting.'));
      return;
    }
    const rows = items.map((job) => {
      const plan = this.plans.get(job.promptId);
      const err = this.plans.error(job.promptId);
      let verdict = badge('muted', 'planning…');
      if (plan) {
        const v = planVerdict(plan);
        verdict = badge(v.kind, v.label, v.reason);
      } else if (err) {
        verdict = badge('no-fit', 'no plan', err);
      }
      return el('tr', {},
        el('td', {class: 'mono'}, `#${job.number ?? '?'}`),
        el('td', {class: 'mono', title: job.promptId}, shortId(job.promptId)),
        el('td', {class: 'num'}, plan ? bytes(obj(plan).peak) : '–'),
        el('td', {}, verdict),
        el('td', {class: 'actions'},
          el('button', {class: 'btn btn-small', onclick: () => this.act(api.deletePending(job.promptId))}, 'Delete')));
    });
    fill(this.pendingEl, el('table', {class: 'table'},
      el('thead', {}, el('tr', {},
        el('th', {}, 'number'), el('th', {}, 'prompt'), el('th', {class: 'num'}, 'planned peak'),
        el('th', {}, 'plan'), el('th', {}, ''))),
      el('tbody', {}, rows)));
  }

  renderHistory(items) {
    const sig = JSON.stringify(items.map((h) => [h.promptId, h.outcome, h.images.length, h.measuredPeak]));
    if (sig === this.historySig) return;
    this.historySig = sig;
    if (!items.length) {
      fill(this.historyEl, emptyRow('No finished jobs yet.'));
      return;
    }
    const rows = items.map((h) => el('tr', {class: 'history-row', dataset: {promptId: h.promptId}},
      el('td', {}, badge(h.outcome, h.outcome, h.error ? `${h.errorNode}: ${h.error}` : null)),
      el('td', {class: 'mono', title: h.promptId}, shortId(h.promptId)),
      el('td', {}, clock(h.end)),
      el('td', {class: 'num'}, duration(h.duration)),
      el('td', {class: 'num'}, bytes(h.plannedPeak)),
      el('td', {class: 'num'}, bytes(h.measuredPeak)),
      el('td', {class: 'thumbs'}, h.images.length
        ? h.images.slice(0, 4).map((img) => el('a', {href: viewUrl(img), target: '_blank', rel: 'noopener'},
          el('img', {class: 'thumb', src: viewUrl(img), alt: str(img.filename), loading: 'lazy'})))
        : el('span', {class: 'muted small'}, h.error ? h.error.slice(0, 80) : 'no images')),
      el('td', {class: 'actions'},
        el('button', {class: 'btn btn-small', onclick: () => this.act(api.deleteHistory(h.promptId))}, 'Delete'))));
    fill(this.historyEl, el('table', {class: 'table'},
      el('thead', {}, el('tr', {},
        el('th', {}, 'outcome'), el('th', {}, 'prompt'), el('th', {}, 'ended'),
        el('th', {class: 'num'}, 'time'), el('th', {class: 'num'}, 'planned peak'),
        el('th', {class: 'num'}, 'measured peak'), el('th', {}, 'outputs'), el('th', {}, ''))),
      el('tbody', {}, rows)));
  }

  interrupt(promptId) {
    this.act(api.interrupt(promptId));
  }

  act(promise) {
    promise.then(() => this.onChanged && this.onChanged(), (e) => this.onError(e.message));
  }
}

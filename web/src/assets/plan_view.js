// The plan view: a workflow (pasted, opened from a .json file, or from a PNG that carries one)
// and a budget give the plan per node without running anything (POST /headroom/plan); the same
// workflow can be queued from here (POST /prompt).
import {api} from './api.js';
import {byId, el, fill} from './dom.js';
import {arr, bytes, num, obj, str} from './format.js';
import {pngPrompt} from './png_prompt.js';
import {planVerdict} from './plan_verdict.js';

export class PlanView {
  constructor({clientId, onQueued}) {
    this.clientId = clientId;
    this.onQueued = onQueued;
    this.text = byId('workflow-text');
    this.budget = byId('plan-budget');
    this.result = byId('plan-result');
    this.note = byId('plan-note');
    byId('plan-btn').addEventListener('click', () => this.plan());
    byId('queue-btn').addEventListener('click', () => this.queue());
    byId('example-btn').addEventListener('click', () => this.loadExample());
    byId('workflow-file').addEventListener('change', (e) => this.open(e.target.files[0]));
    const drop = byId('workflow-drop');
    drop.addEventListener('dragover', (e) => {
      e.preventDefault();
      drop.classList.add('dragging');
    });
    drop.addEventListener('dragleave', () => drop.classList.remove('dragging'));
    drop.addEventListener('drop', (e) => {
      e.preventDefault();
      drop.classList.remove('dragging');
      if (e.dataTransfer.files.length) this.open(e.dataTransfer.files[0]);
    });
  }

  // The workflow in the text box; ComfyUI's {"prompt": {...}} wrapper is accepted too.
  workflow() {
    let j;
    try {
      j = JSON.parse(this.text.value);
    } catch (e) {
      throw new Error(`the workflow is not valid JSON: ${e.message}`);
    }
    if (!j || typeof j !== 'object' || Array.isArray(j)) throw new Error('the workflow must be a JSON object');
    if (j.prompt && typeof j.prompt === 'object') j = j.prompt;
    if (Array.isArray(j.nodes) && j.links) {
      throw new Error('this is a UI-format workflow; export it with "Save (API Format)" in ComfyUI');
    }
    return j;
  }

  async open(file) {
    if (!file) return;
    try {
      const buf = await file.arrayBuffer();
      const isPng = file.type === 'image/png' || /\.png$/i.test(file.name);
      const wf = isPng ? await pngPrompt(buf) : JSON.parse(new TextDecoder().decode(buf));
      this.text.value = JSON.stringify(wf, null, 2);
      this.say(`loaded ${file.name}`);
      await this.plan();
    } catch (e) {
      this.fail(`${file.name}: ${e.message}`);
    }
  }

  async loadExample() {
    try {
      const res = await fetch('/headroom/assets/example_workflow.json');
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      this.text.value = JSON.stringify(await res.json(), null, 2);
      this.say('loaded the example workflow (examples/default_workflow.json)');
    } catch (e) {
      this.fail(`example workflow: ${e.message}`);
    }
  }

  async plan() {
    try {
      const budget = this.budget.value.trim() || null;
      this.say('planning…');
      const plan = await api.plan(this.workflow(), budget);
      this.render(plan);
      this.say('');
    } catch (e) {
      this.fail(e.message);
    }
  }

  async queue() {
    try {
      const r = obj(await api.queuePrompt(this.workflow(), this.clientId));
      this.say(`queued prompt ${str(r.prompt_id)} as #${num(r.number)}`);
      this.onQueued(r);
    } catch (e) {
      this.fail(e.message);
    }
  }

  say(text) {
    this.note.textContent = text;
    this.note.className = 'note';
  }

  fail(text) {
    this.note.textContent = text;
    this.note.className = 'note note-error';
    fill(this.result);
  }

  render(plan) {
    const p = obj(plan);
    const v = planVerdict(p);
    const budget = num(p.budget);
    const nodes = arr(p.nodes).map(obj);
    const scale = Math.max(budget || 0, num(p.peak) || 0, 1);
    const stat = (label, value, cls = '', note = null) => el('div', {class: `stat ${cls}`},
      el('div', {class: 'stat-label'}, label), el('div', {class: 'stat-value'}, value),
      note ? el('div', {class: 'stat-note'}, note) : null);
    const rows = nodes.map((n) => el('tr', {class: n.fits === false ? 'row-bad' : ''},
      el('td', {class: 'mono'}, str(n.node_id)),
      el('td', {}, str(n.class_type)),
      el('td', {class: 'num'}, bytes(n.weight_bytes)),
      el('td', {class: 'num'}, bytes(n.resident_bytes)),
      el('td', {class: 'num'}, bytes(n.streamed_bytes)),
      el('td', {class: 'num'}, bytes(n.arena_bytes)),
      el('td', {class: 'num'}, num(n.graph_runs) ?? '–'),
      el('td', {class: 'num'}, bytes(n.total_after)),
      el('td', {class: 'num strong'}, bytes(n.peak)),
      el('td', {class: 'bar-cell'}, el('div', {class: 'bar'},
        el('div', {class: `bar-fill${budget !== null && num(n.peak) > budget ? ' bar-over' : ''}`,
          style: {width: `${Math.min(100, (100 * (num(n.peak) || 0)) / scale)}%`}}))),
      el('td', {class: 'decision'}, [str(n.decision), str(n.residency) ? `; ${n.residency}` : ''].join('')),
      el('td', {}, n.fits === false ? el('span', {class: 'badge badge-no-fit'}, 'no') : el('span', {class: 'badge badge-fits'}, 'yes'))));
    fill(this.result,
      el('div', {class: 'stats'},
        stat('verdict', [el('span', {class: `badge badge-${v.kind}`}, v.label),
          el('div', {class: 'stat-note'}, v.reason)]),
        stat('predicted peak', bytes(p.peak)),
        stat('budget', budget === null ? 'none' : bytes(budget)),
        stat('smallest budget that fits', bytes(p.smallest_budget)),
        stat('device', `${str(p.device, '?')} · ${str(p.dtype, '?')}`),
        stat('weights', p.weights_counted ? 'counted' : 'not counted', '',
          p.weights_counted ? 'device copies count against the budget' : 'weights stay in host memory')),
      p.fits === false ? el('div', {class: 'why-not'}, `Does not fit: ${str(p.why_not)}`) : null,
      el('table', {class: 'table plan-table', id: 'plan-table'},
        el('thead', {}, el('tr', {},
          el('th', {}, 'node'), el('th', {}, 'class'), el('th', {class: 'num'}, 'weights'),
          el('th', {class: 'num'}, 'resident'), el('th', {class: 'num'}, 'streamed'),
          el('th', {class: 'num'}, 'activations'), el('th', {class: 'num'}, 'runs'),
          el('th', {class: 'num'}, 'held after'), el('th', {class: 'num'}, 'peak'), el('th', {}, ''),
          el('th', {}, 'residency · tiling'), el('th', {}, 'fits'))),
        el('tbody', {}, rows)),
      el('p', {class: 'muted small'},
        'Allocator level: bytes headroom\'s allocator would hold. "activations" is the largest planned arena of the node\'s graphs (op workspaces inside); bars are the node\'s peak against the budget.'));
  }
}

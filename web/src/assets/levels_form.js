// The warning and danger levels (fractions of the budget): shown as the server has them and set
// from the page (POST /headroom/levels, which every client then sees in vram_update).
import {api} from './api.js';
import {byId} from './dom.js';
import {num} from './format.js';

export class LevelsForm {
  constructor({onError, onChanged}) {
    this.onError = onError;
    this.onChanged = onChanged;
    this.warning = byId('level-warning');
    this.danger = byId('level-danger');
    this.dirty = false;
    for (const input of [this.warning, this.danger]) input.addEventListener('input', () => (this.dirty = true));
    byId('levels-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.apply();
    });
  }

  // Behind --queue the levels are each worker's own (Note [levels per worker] in the server), set
  // where the worker starts; the front refuses them, so the form only shows them there.
  setReadOnly(readOnly) {
    if (readOnly === this.readOnly) return;
    this.readOnly = readOnly;
    const form = byId('levels-form');
    for (const input of form.querySelectorAll('input, button')) input.disabled = readOnly;
    for (const input of [this.warning, this.danger]) {
      input.placeholder = readOnly ? '–' : '';
      if (readOnly) input.value = '';
    }
    form.title = readOnly
      ? 'set per worker: headroom worker --vram-warning PCT --vram-danger PCT; each chart draws its worker\'s levels'
      : 'fractions of the budget; sent to the server for every client';
  }

  // A vram_update (or /headroom/levels) carries the live fractions; the inputs follow them
  // unless the user is editing.
  fromServer(d) {
    if (this.dirty) return;
    const w = num(d.warning_fraction ?? d.warning);
    const dg = num(d.danger_fraction ?? d.danger);
    if (w !== null && w <= 1) this.warning.value = String(Math.round(w * 1000) / 10);
    if (dg !== null && dg <= 1) this.danger.value = String(Math.round(dg * 1000) / 10);
  }

  async apply() {
    const w = Number(this.warning.value) / 100;
    const d = Number(this.danger.value) / 100;
    try {
      const levels = await api.setLevels(w, d);
      this.dirty = false;
      this.fromServer(levels);
      this.onChanged(levels);
    } catch (e) {
      this.onError(`levels: ${e.message}`);
    }
  }
}

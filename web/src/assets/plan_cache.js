// Plans of queued jobs (POST /headroom/plan), asked one at a time and kept per prompt id: a
// queued prompt does not change, and the server plans it the same way until its budget does.
import {api} from './api.js';

export class PlanCache {
  constructor(onPlanned) {
    this.onPlanned = onPlanned;
    this.plans = new Map();  // prompt id -> plan
    this.errors = new Map();  // prompt id -> message
    this.waiting = [];  // [{promptId, prompt}]
    this.busy = false;
    this.budget = undefined;  // the server budget the plans were made for
    this.jobBudgets = new Map();  // prompt id -> the lowered budget the job runs with
  }

  get(promptId) {
    return this.plans.get(promptId) || null;
  }

  error(promptId) {
    return this.errors.get(promptId) || null;
  }

  // Plans made for another budget are asked again.
  setBudget(budget) {
    if (budget === this.budget) return;
    this.budget = budget;
    this.plans.clear();
    this.errors.clear();
  }

  // The job runs with a lowered budget (Note [warning level] in the server): its plan is asked
  // again for that budget, so that the planned peaks shown are the ones it runs with.
  setJobBudget(promptId, budget) {
    if (this.jobBudgets.get(promptId) === budget) return;
    this.jobBudgets.set(promptId, budget);
    // Kept past keepOnly (the message may come before /queue shows the job), but not forever.
    if (this.jobBudgets.size > 100) this.jobBudgets.delete(this.jobBudgets.keys().next().value);
    this.plans.delete(promptId);
    this.errors.delete(promptId);
  }

  want(promptId, prompt) {
    if (!promptId || this.plans.has(promptId) || this.errors.has(promptId)) return;
    if (this.waiting.some((w) => w.promptId === promptId)) return;
    this.waiting.push({promptId, prompt});
    this.next();
  }

  // Forget jobs that left the queue (their plans stay while history shows them: not needed).
  keepOnly(ids) {
    const keep = new Set(ids);
    for (const id of [...this.plans.keys()]) if (!keep.has(id)) this.plans.delete(id);
    for (const id of [...this.errors.keys()]) if (!keep.has(id)) this.errors.delete(id);
    this.waiting = this.waiting.filter((w) => keep.has(w.promptId));
  }

  async next() {
    if (this.busy || !this.waiting.length) return;
    this.busy = true;
    const {promptId, prompt} = this.waiting.shift();
    try {
      this.plans.set(promptId, await api.plan(prompt, this.jobBudgets.get(promptId) ?? null));
    } catch (e) {
      // A network failure (TypeError) is not the job's: it is asked again once the server is back.
      if (!(e instanceof TypeError)) this.errors.set(promptId, e.message);
    }
    this.busy = false;
    this.onPlanned();
    this.next();
  }
}

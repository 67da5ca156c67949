// The dashboard: wires the WebSocket feed and the HTTP routes to the VRAM charts (one per device),
// the queue and history cards and the plan view. Everything the server sends is read defensively (format.js).
import {api} from './api.js';
import {byId, el, fill} from './dom.js';
import {arr, bytes, obj, percent, num, str} from './format.js';
import {EVENT_COLORS} from './vram_chart.js';
import {VramBoard} from './vram_board.js';
import {JobEvents} from './events.js';
import {JobsView} from './jobs_view.js';
import {LiveJob, historyItem, queueItem} from './job_state.js';
import {LevelsForm} from './levels_form.js';
import {PlanCache} from './plan_cache.js';
import {PlanView} from './plan_view.js';
import {ServerSocket} from './socket.js';

const HISTORY_ITEMS = 20;
const POLL_MS = 4000;
const REDRAW_MS = 500;

// Web storage may be switched off; the page works without it (it only forgets across reloads).
function stored(storage, key, fallback) {
  try {
    const v = window[storage].getItem(key);
    if (v !== null) return v;
    window[storage].setItem(key, fallback);
  } catch {
    // no storage: use the fallback
  }
  return fallback;
}

// One client id per tab, kept across reloads as ComfyUI's page does.
function clientIdGet() {
  const hex = () => Math.floor(Math.random() * 0x100000000).toString(16).padStart(8, '0');
  return stored('sessionStorage', 'headroom.clientId', `headroom-dashboard-${hex()}${hex()}`);
}

class Dashboard {
  constructor() {
    this.clientId = clientIdGet();
    this.running = null;
    this.pending = [];
    this.history = [];
    this.live = null;
    this.board = new VramBoard(byId('vram-panels'), byId('vram-empty'));
    this.events = new JobEvents(this.board, () => this.renderEvents());
    this.plans = new PlanCache(() => this.renderJobs());
    this.jobs = new JobsView({
      running: byId('running-body'),
      pending: byId('pending-body'),
      history: byId('history-body'),
      plans: this.plans,
      onError: (m) => this.toast(m, true),
    });
    this.jobs.onChanged = () => this.refreshSoon();
    this.levels = new LevelsForm({
      onError: (m) => this.toast(m, true),
      onChanged: (l) => this.events.add('levels', `levels set to warning ${percent(l.warning)}, danger ${percent(l.danger)}`),
    });
    this.planView = new PlanView({
      clientId: this.clientId,
      onQueued: (r) => {
        this.toast(`Queued prompt ${str(r.prompt_id).slice(0, 8)} (#${num(r.number)})`);
        this.refreshSoon();
      },
    });
    this.socket = new ServerSocket(this.clientId);
    this.wireSocket();
    this.wireControls();
  }

  start() {
    this.socket.connect();
    setInterval(() => this.redraw(), REDRAW_MS);
    setInterval(() => this.poll(), POLL_MS);
    setInterval(() => this.live && this.renderJobs(), 1000);  // the running job's elapsed time
    window.addEventListener('hashchange', () => this.showView());
    this.showView();
    this.renderJobs();
    this.renderEvents();
    document.body.dataset.ready = 'true';
  }

  // A worker's chart may go stale between updates (Note [one chart per device]): the header's
  // count and level follow.
  redraw() {
    this.board.redraw();
    if (this.board.distributed && this.socket.state === 'open') this.memoryState();
  }

  wireControls() {
    const select = byId('window-select');
    select.value = stored('localStorage', 'headroom.window', '300');
    if (!select.value) select.value = '300';
    this.board.setWindow(Number(select.value));
    select.addEventListener('change', () => {
      try {
        localStorage.setItem('headroom.window', select.value);
      } catch {
        // not kept across reloads
      }
      this.board.setWindow(Number(select.value));
    });
  }

  wireSocket() {
    const s = this.socket;
    s.onState((state, attempt) => this.connectionState(state, attempt));
    s.on('status', (d) => {
      const remaining = num(obj(obj(d.status).exec_info).queue_remaining);
      if (remaining !== null) byId('queue-count').textContent = String(remaining);
      this.refreshSoon();
    });
    s.on('vram_update', (d) => this.vramUpdate(d));
    s.on('execution_start', (d) => {
      if (!str(d.prompt_id)) return;
      this.liveFor(str(d.prompt_id), num(d.timestamp));
      this.events.start(str(d.prompt_id), num(d.timestamp) ?? undefined);
      this.refreshSoon();
    });
    // Messages about a job name it; one that does not is about nothing we can show.
    const job = (fn) => (d) => (str(d.prompt_id) ? fn(d, this.liveFor(str(d.prompt_id))) : undefined);
    s.on('execution_cached', job((d, live) => live.cached(d.nodes)));
    s.on('executing', job((d, live) => {
      if (d.node === null || d.node === undefined) return this.refreshSoon();
      live.executing(String(d.node));
      this.renderJobs();
    }));
    s.on('progress', job((d, live) => {
      live.progress = {node: String(d.node ?? ''), value: num(d.value) ?? 0, max: num(d.max) ?? 0};
      this.renderJobs();
    }));
    s.on('executed', job((d, live) => live.executed(String(d.node ?? ''), d.output)));
    for (const [type, outcome] of [['execution_success', 'success'], ['execution_error', 'error'],
      ['execution_interrupted', 'interrupted']]) {
      s.on(type, (d) => {
        this.events.end(str(d.prompt_id), outcome, num(d.timestamp) ?? undefined);
        if (type === 'execution_error' && d.prompt_id) this.toast(`Job ${str(d.prompt_id).slice(0, 8)} failed: ${str(d.exception_message)}`, true);
        this.refreshSoon();
      });
    }
    s.on('headroom_memory', (d) => {
      if (!str(d.message)) return;
      this.events.memory(d);
      const lowered = num(d.planned_peak_degraded);
      const budget = num(d.warning);
      if (d.level === 'warning' && d.degraded === true && lowered !== null && budget !== null && d.prompt_id) {
        this.liveFor(str(d.prompt_id)).plannedPeak = lowered;
        this.plans.setJobBudget(str(d.prompt_id), budget);
        if (this.running && this.running.promptId === d.prompt_id) this.plans.want(d.prompt_id, this.running.prompt);
      }
    });
    s.on('headroom_node', job((d, live) => {
      live.nodeEnded(d);
      this.renderJobs();
    }));
    s.on('headroom_queue_held', (d) => this.events.add('held', d.held
      ? `queue held: ${bytes(d.in_use)} in use is above the danger level ${bytes(d.danger)}`
      : 'queue released: memory in use is below the danger level'));
    s.on('binary', (buf) => this.previewFrame(buf));
  }

  // The only device's chart on a single server (the first one behind --queue).
  get chart() {
    return this.board.primary();
  }

  // The live state of `promptId`'s run, made when the first message about it arrives.
  liveFor(promptId, startMs = null) {
    if (!this.live || this.live.promptId !== promptId) {
      if (this.live) this.live.dispose();
      this.live = new LiveJob(promptId, startMs ?? Date.now());
    }
    return this.live;
  }

  connectionState(state, attempt) {
    document.body.dataset.connection = state;
    const pill = byId('conn-pill');
    pill.dataset.state = state;
    const banner = byId('conn-banner');
    if (state === 'open') {
      pill.textContent = 'live';
      banner.hidden = true;
      this.board.live = true;
      this.refreshAll();
      return;
    }
    this.board.gap();
    this.memoryUnknown();
    pill.textContent = state === 'connecting' ? 'connecting…' : `reconnecting… (${attempt})`;
    banner.hidden = state === 'connecting';
    byId('conn-banner-text').textContent =
      `Connection to the server lost — reconnecting (attempt ${attempt}). The page keeps what it has; the chart resumes when the server is back.`;
  }

  vramUpdate(d) {
    this.board.push(d);
    if (this.board.distributed && !this.workersAsked) {
      this.workersAsked = true;
      this.workersPoll();
    }
    this.plans.setBudget(this.board.budget());
    const job = this.jobOf(d);
    if (job && d.node) this.liveFor(job).vram(d);
    // Note [levels per worker]: behind --queue each worker has its own levels, drawn on its
    // chart; the form is then read-only and empty.
    this.levels.setReadOnly(this.board.distributed);
    if (!this.board.distributed) this.levels.fromServer(d);
    this.memoryState();
  }

  // The job whose running node an update is about: on a single server the running one (or the
  // one our messages are about); a worker's only when its heartbeat says it runs the job shown.
  jobOf(d) {
    if (!str(d.worker)) return this.running ? this.running.promptId : this.live && this.live.promptId;
    const job = this.board.runningOn(str(d.worker));
    return job && this.running && job === this.running.promptId ? job : null;
  }

  // The header's and the card's colour: the worst level of the devices still sending.
  memoryState() {
    const {level, panel} = this.board.worst();
    const d = obj(panel && panel.last);
    const budget = num(d.budget);
    document.body.dataset.level = level;
    byId('chart-card').dataset.level = level;
    const pill = byId('mem-pill');
    pill.dataset.level = level;
    const share = budget ? ` · ${percent(num(obj(d.allocator).total) / budget)} of budget` : '';
    if (!this.board.distributed) {
      pill.textContent = level === 'ok' ? `memory ok${share}` : `${level}${share}`;
      return;
    }
    const n = this.board.livePanels().length;
    pill.textContent = level === 'ok' ? `memory ok · ${n} device${n === 1 ? '' : 's'}`
      : `${level} on ${panel.worker}${share}`;
  }

  // While disconnected the last numbers are stale: the header says so rather than show them.
  memoryUnknown() {
    document.body.dataset.level = 'ok';
    byId('chart-card').dataset.level = 'ok';
    const pill = byId('mem-pill');
    pill.dataset.level = 'unknown';
    pill.textContent = 'memory: no data';
  }

  previewFrame(buf) {
    if (!this.live || buf.byteLength < 8) return;
    const v = new DataView(buf);
    if (v.getUint32(0) !== 1) return;
    const type = v.getUint32(4) === 1 ? 'image/jpeg' : 'image/png';
    this.live.setPreview(URL.createObjectURL(new Blob([buf.slice(8)], {type})));
    this.renderJobs();
  }

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => this.refreshAll(), 150);
  }

  poll() {
    if (this.socket.state !== 'open') return;
    this.refreshAll();
    if (this.board.distributed) this.workersPoll();
  }

  // Heartbeats: which workers live (their charts go stale otherwise) and what each runs.
  async workersPoll() {
    try {
      const workers = arr(await api.workers());
      this.board.workersSeen(workers);
      byId('device-name').textContent = `${workers.length} worker${workers.length === 1 ? '' : 's'}`;
      this.memoryState();
    } catch {
      // asked again on the next poll
    }
  }

  async refreshAll() {
    const [queue, history] = await Promise.allSettled([api.queue(), api.history(HISTORY_ITEMS)]);
    if (queue.status === 'fulfilled') this.queueLoaded(obj(queue.value));
    if (history.status === 'fulfilled') this.historyLoaded(obj(history.value));
    this.renderJobs();
    if (!this.systemShown) this.systemInfo();
  }

  queueLoaded(q) {
    const running = arr(q.queue_running).map(queueItem).filter((j) => j.promptId);
    this.running = running[0] || null;
    this.pending = arr(q.queue_pending).map(queueItem).filter((j) => j.promptId)
      .sort((a, b) => (a.number ?? 0) - (b.number ?? 0));
    const jobs = [...running, ...this.pending];
    this.plans.keepOnly(jobs.map((j) => j.promptId));
    for (const j of jobs.slice(0, 20)) this.plans.want(j.promptId, j.prompt);
    if (this.running) {
      this.liveFor(this.running.promptId);
      this.events.start(this.running.promptId);
    }
  }

  historyLoaded(h) {
    this.history = Object.entries(h).map(([id, e]) => historyItem(id, e)).reverse();
    for (const item of this.history) {
      if (this.events.started.has(item.promptId)) this.events.end(item.promptId, item.outcome, item.end ?? undefined);
    }
    if (this.live && !this.running && this.history.some((i) => i.promptId === this.live.promptId)) {
      this.live.dispose();
      this.live = null;
    }
  }

  async systemInfo() {
    try {
      const s = obj(await api.systemStats());
      if (this.board.distributed) return;  // the worker count, from workersPoll
      const dev = obj(arr(s.devices)[0]);
      byId('device-name').textContent = str(dev.name, 'unknown device');
      this.systemShown = true;
    } catch {
      // shown again on the next refresh
    }
  }

  renderJobs() {
    const live = this.live && this.running && this.live.promptId === this.running.promptId ? this.live : null;
    this.jobs.renderRunning(this.running, live);
    this.jobs.renderPending(this.pending);
    this.jobs.renderHistory(this.history);
    byId('pending-count').textContent = String(this.pending.length);
  }

  renderEvents() {
    const items = this.board.recentEvents(8);
    fill(byId('event-list'), items.length
      ? items.map((e) => el('li', {class: `event event-${e.kind}`},
        el('span', {class: 'event-dot', style: {background: EVENT_COLORS[e.kind] || '#9ca3af'}}),
        el('span', {class: 'event-time mono'}, e.time),
        el('span', {class: 'event-text'}, e.text)))
      : el('li', {class: 'muted small'}, 'No events in this window yet: job starts and ends, tiling and streaming decisions and OOM recoveries appear here and on the chart.'));
  }

  showView() {
    const plan = location.hash === '#plan';
    byId('view-live').hidden = plan;
    byId('view-plan').hidden = !plan;
    byId('tab-live').classList.toggle('active', !plan);
    byId('tab-plan').classList.toggle('active', plan);
    if (!plan) this.board.resize();
  }

  toast(text, error = false) {
    const t = el('div', {class: `toast${error ? ' toast-error' : ''}`, role: 'status'}, text);
    byId('toasts').append(t);
    setTimeout(() => t.remove(), error ? 8000 : 4000);
  }
}

const dashboard = new Dashboard();
window.headroomDashboard = dashboard;  // for the browser console and web/tests/
dashboard.start();

// The dashboard behind `headroom serve --queue`: a redis-server of the test's own on loopback, one
// front and two CPU workers (`worker-a`, `worker-b`) with the tiny checkpoint. The page shows one
// chart per worker, titled with the worker and its device, with the levels form read-only (the
// front refuses POST /headroom/levels: Note [levels per worker]); a worker killed with SIGKILL has
// its chart marked stopped, and a page opened afterwards shows only the live worker's (the front
// resends the latest vram_update of live workers only). Any console or page error fails it;
// screenshots go to test-artifacts/dashboard/.
// Run: node web/tests/dashboard_cluster.test.mjs build/headroom
import {existsSync, mkdirSync, mkdtempSync, rmSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {ErrorLog, Proc, REPO, answers, browserLaunch, check, fail, freePort, log, prerequisites,
  testNamed, tinyModelMake} from './harness.mjs';

testNamed('dashboard_cluster_browser');
const SHOTS = join(REPO, 'test-artifacts', 'dashboard');
const REDIS = '/usr/bin/redis-server';
const TIMEOUT_MS = 90_000;
const WORKERS = ['worker-a', 'worker-b'];

// redis-server, a front and the workers; `stop()` kills whatever runs.
class Cluster {
  constructor(binary, dir, webRoot) {
    this.binary = binary;
    this.dir = dir;
    this.webRoot = webRoot;
    this.workers = new Map();
  }

  folders() {
    const d = this.dir;
    return ['--models-dir', join(d, 'models'), '--output-dir', join(d, 'output'),
      '--input-dir', join(d, 'input'), '--temp-dir', join(d, 'temp'), '--device', 'cpu', '--threads', '1'];
  }

  async start() {
    const redisPort = await freePort();
    this.redis = new Proc('redis-server', REDIS, ['--port', String(redisPort), '--bind', '127.0.0.1',
      '--dir', this.dir, '--save', '', '--appendonly', 'no']);
    this.redis.start();
    await this.redis.waitUntil(async () => this.redis.log.includes('Ready to accept'), 'ready');
    this.queue = `redis://127.0.0.1:${redisPort}/0`;
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    this.front = new Proc('front', this.binary, ['serve', '--queue', this.queue, '--port', String(port),
      '--database', ':memory:', '--web-root', this.webRoot, ...this.folders()]);
    this.front.start();
    await this.front.waitUntil(() => answers(`${this.url}/headroom/`), 'GET /headroom/');
    for (const name of WORKERS) {
      const w = new Proc(name, this.binary, ['worker', '--queue', this.queue, '--name', name, ...this.folders()]);
      w.start();
      this.workers.set(name, w);
    }
    await this.front.waitUntil(async () => (await this.workersListed()).length === WORKERS.length,
      'both workers in /headroom/workers');
  }

  async workersListed() {
    const r = await fetch(`${this.url}/headroom/workers`);
    return (await r.json()).map((w) => w.id);
  }

  async stop() {
    for (const p of [this.front, ...this.workers.values(), this.redis]) if (p) await p.kill();
  }
}

async function main() {
  const {binary, chromium, build} = await prerequisites();
  if (!existsSync(REDIS)) fail(`${REDIS} is missing: apt-get install redis-server (.ci/install-deps)`);
  const dir = mkdtempSync(join(tmpdir(), 'hr-dashboard-cluster-'));
  const watchdog = setTimeout(() => fail(`not done after ${TIMEOUT_MS / 1000} s`), TIMEOUT_MS);
  let cluster;
  let browser;
  try {
    mkdirSync(SHOTS, {recursive: true});
    tinyModelMake(binary, dir);
    cluster = new Cluster(binary, dir, build(join(dir, 'web')));
    await cluster.start();
    browser = await browserLaunch(chromium, dir);
    const page = browser.pages()[0] || (await browser.newPage());
    const errors = new ErrorLog(page);
    const shot = (name) => page.screenshot({path: join(SHOTS, `${name}.png`), fullPage: true});
    await run(page, cluster, shot);
    if (errors.items.length) throw new Error(`console or page errors:\n  ${errors.items.map((e) => e.text).join('\n  ')}`);
  } finally {
    clearTimeout(watchdog);
    if (browser) await browser.close();
    if (cluster) await cluster.stop();
    rmSync(dir, {recursive: true, force: true});
  }
}

// The titles of the charts on the page and whether each is marked stopped.
function panels(page) {
  return page.evaluate(() => [...document.querySelectorAll('.vram-panel')].map((p) => ({
    title: p.querySelector('.panel-title')?.textContent ?? '',
    stale: p.dataset.stale === 'true',
  })));
}

async function run(page, cluster, shot) {
  await check('the page shows one chart per worker, named after it', async () => {
    await page.goto(`${cluster.url}/headroom/`);
    await page.waitForSelector('body[data-ready="true"][data-connection="open"]');
    // The workers are idle: what the page draws is what the front resent when it joined.
    await page.waitForFunction(() => document.querySelectorAll('.vram-panel').length === 2, null, {timeout: 10_000});
    const titles = (await panels(page)).map((p) => p.title);
    for (const [i, name] of WORKERS.entries()) {
      if (!titles[i] || !titles[i].startsWith(`${name} · `) || titles[i].endsWith('unknown device')) {
        throw new Error(`chart titles ${JSON.stringify(titles)}: none for ${name} with its device`);
      }
    }
    const canvases = await page.locator('.vram-panel .chart-alloc canvas, .vram-panel .chart-driver canvas').count();
    if (canvases < 4) throw new Error(`${canvases} chart canvases for two workers`);
    if (!(await page.locator('#level-warning').isDisabled())) throw new Error('the levels form is editable behind --queue');
    const set = await fetch(`${cluster.url}/headroom/levels`, {method: 'POST', body: '{"warning": 0.5}'});
    if (set.status !== 409) throw new Error(`POST /headroom/levels on a front answered ${set.status}, not 409`);
    await page.waitForFunction(() => /^2 workers$/.test(document.getElementById('device-name').textContent));
    await shot('11-cluster-two-workers');
  });

  await check('a killed worker\'s chart is marked stopped', async () => {
    await cluster.workers.get('worker-b').kill();
    await page.waitForFunction(() => document.querySelector('.vram-panel[data-stale="true"] .panel-title')
      ?.textContent.startsWith('worker-b'), null, {timeout: 30_000});
    const p = await panels(page);
    if (p.find((x) => x.title.startsWith('worker-a')).stale) throw new Error('the live worker is marked stopped too');
    await page.waitForFunction(() => document.getElementById('mem-pill').textContent === 'memory ok · 1 device');
    await shot('12-cluster-worker-stopped');
  });

  await check('a page opened afterwards shows only the live worker', async () => {
    await page.reload();
    await page.waitForSelector('body[data-ready="true"][data-connection="open"]');
    await page.waitForFunction(() => document.querySelectorAll('.vram-panel').length === 1, null, {timeout: 10_000});
    await page.waitForTimeout(500);
    const p = await panels(page);
    if (p.length !== 1 || !p[0].title.startsWith('worker-a')) throw new Error(`charts after reload: ${JSON.stringify(p)}`);
  });
}

const t0 = Date.now();
main().then(
  () => {
    log(`PASS in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    process.exit(0);
  },
  (e) => fail(e && e.stack ? e.stack : String(e)),
);

// What the dashboard's browser tests share: their prerequisites (failures, never skips: CI
// installs all of it), free ports, child processes with their logs, the tiny checkpoint,
// Debian's chromium through playwright-core, and a log of console and page errors.
import {spawn, spawnSync} from 'node:child_process';
import {existsSync, mkdirSync} from 'node:fs';
import {createServer} from 'node:net';
import {dirname, join, resolve} from 'node:path';
import {fileURLToPath} from 'node:url';

export const WEB = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const REPO = resolve(WEB, '..');
export const CHROMIUM = '/usr/bin/chromium';

let testName = 'dashboard';

export function testNamed(name) {
  testName = name;
}

export function fail(message) {
  console.error(`${testName}: FAIL: ${message}`);
  process.exit(1);
}

export function log(message) {
  console.log(`${testName}: ${message}`);
}

export async function check(name, fn) {
  const t0 = Date.now();
  await fn();
  log(`ok  ${name} (${Date.now() - t0} ms)`);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// What must be there; a missing piece fails the test.
export async function prerequisites() {
  const binary = process.argv[2];
  if (!binary || !existsSync(binary)) fail(`usage: ${process.argv[1]} HEADROOM_BINARY (got ${binary})`);
  if (!existsSync(CHROMIUM)) fail(`${CHROMIUM} is missing: apt-get install chromium (.ci/install-deps)`);
  let chromium;
  try {
    ({chromium} = await import('playwright-core'));
  } catch (e) {
    fail(`playwright-core is not installed: run \`npm ci\` in web/ (${e.message})`);
  }
  let build;
  try {
    ({build} = await import('../scripts/build.mjs'));
  } catch (e) {
    fail(`web/scripts/build.mjs: ${e.message}`);
  }
  return {binary: resolve(binary), chromium, build};
}

export function freePort() {
  return new Promise((ok, bad) => {
    const s = createServer();
    s.once('error', bad);
    s.listen(0, '127.0.0.1', () => {
      const {port} = s.address();
      s.close(() => ok(port));
    });
  });
}

// `headroom make-model`'s tiny SD1 checkpoint in `dir`/models/checkpoints.
export function tinyModelMake(binary, dir) {
  const model = join(dir, 'models', 'checkpoints', 'headroom-tiny-sd1.safetensors');
  mkdirSync(dirname(model), {recursive: true});
  const made = spawnSync(binary, ['make-model', '--arch', 'sd1', '--size', 'tiny', '--seed', '0', '-o', model],
    {encoding: 'utf8'});
  if (made.status !== 0) fail(`make-model: ${made.stderr}`);
}

// One child process with its stdout and stderr kept in `log`.
export class Proc {
  constructor(name, binary, args) {
    this.name = name;
    this.binary = binary;
    this.args = args;
    this.log = '';
  }

  start() {
    this.proc = spawn(this.binary, this.args, {stdio: ['ignore', 'pipe', 'pipe']});
    this.proc.stdout.on('data', (b) => (this.log += b));
    this.proc.stderr.on('data', (b) => (this.log += b));
  }

  get exited() {
    return !this.proc || this.proc.exitCode !== null || this.proc.signalCode !== null;
  }

  // Polls `ready` (async, true when up) for `ms`; fails the test when the process ends or times out.
  async waitUntil(ready, what, ms = 20_000) {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (this.exited) fail(`${this.name} exited: ${this.log}`);
      if (await ready().catch(() => false)) return;
      await sleep(100);
    }
    fail(`${this.name}: ${what} not within ${ms / 1000} s: ${this.log}`);
  }

  async kill() {
    if (this.exited) return;
    const exited = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGKILL');
    await exited;
  }
}

// GET `url` answers 200.
export async function answers(url) {
  const r = await fetch(url);
  return r.ok;
}

// Debian's chromium with a fresh profile (--user-data-dir) per run: nothing cached from an
// earlier run.
export function browserLaunch(chromium, dir) {
  return chromium.launchPersistentContext(join(dir, 'chromium-profile'), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: {width: 1440, height: 1000},
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
}

// Console errors and page errors, each with the time it came.
export class ErrorLog {
  constructor(page) {
    this.items = [];
    page.on('console', (m) => {
      if (m.type() === 'error') this.items.push({t: Date.now(), text: `console: ${m.text()}`});
    });
    page.on('pageerror', (e) => this.items.push({t: Date.now(), text: `page error: ${e.message}`}));
  }
}

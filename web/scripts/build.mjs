// Builds the dashboard into web/dist (or the folder given): web/src as it is (plain ES modules,
// no bundler), uPlot's ES module and stylesheet from node_modules, and the example workflow, so
// that `headroom serve` serves everything itself and nothing is fetched from the network.
import {copyFileSync, existsSync, mkdirSync, readdirSync, rmSync} from 'node:fs';
import {dirname, join, resolve} from 'node:path';
import {fileURLToPath} from 'node:url';

const WEB = resolve(dirname(fileURLToPath(import.meta.url)), '..');

const VENDOR = [
  ['node_modules/uplot/dist/uPlot.esm.js', 'uPlot.esm.js'],
  ['node_modules/uplot/dist/uPlot.min.css', 'uPlot.min.css'],
  ['node_modules/uplot/LICENSE', 'uPlot.LICENSE.txt'],
  ['../examples/default_workflow.json', 'example_workflow.json'],
];

export function build(out = join(WEB, 'dist')) {
  rmSync(out, {recursive: true, force: true});
  mkdirSync(join(out, 'assets'), {recursive: true});
  copyFileSync(join(WEB, 'src/index.html'), join(out, 'index.html'));
  for (const f of readdirSync(join(WEB, 'src/assets'))) {
    copyFileSync(join(WEB, 'src/assets', f), join(out, 'assets', f));
  }
  for (const [from, to] of VENDOR) {
    const src = join(WEB, from);
    if (!existsSync(src)) throw new Error(`${src} is missing: run \`npm ci\` in web/ first`);
    copyFileSync(src, join(out, 'assets', to));
  }
  return out;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = build(process.argv[2] ? resolve(process.argv[2]) : undefined);
  console.log(`dashboard built in ${out}`);
}

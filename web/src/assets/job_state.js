// What the dashboard knows about jobs: the running one (with live node states, sampler progress
// and measured peaks), the pending ones, finished ones from /history, and each job's memory plan.
import {arr, num, obj, str} from './format.js';

// A /queue item: ComfyUI's [number, prompt_id, prompt, extra_data, outputs_to_execute].
export function queueItem(item) {
  const a = arr(item);
  return {number: num(a[0]), promptId: str(a[1]), prompt: obj(a[2])};
}

// A /history entry summarised: outcome, times, peaks, images, error text.
export function historyItem(promptId, entry) {
  const e = obj(entry);
  const status = obj(e.status);
  const messages = arr(status.messages).filter((m) => Array.isArray(m) && m.length >= 2);
  const find = (type) => messages.find((m) => m[0] === type);
  const stamp = (m) => (m ? num(obj(m[1]).timestamp) : null);
  const start = stamp(find('execution_start'));
  const endMsg = [...messages].reverse().find((m) => num(obj(m[1]).timestamp) !== null);
  const end = stamp(endMsg);
  const error = obj(find('execution_error') && find('execution_error')[1]);
  let outcome = status.status_str === 'success' ? 'success' : 'error';
  if (find('execution_interrupted')) outcome = 'interrupted';
  else if (str(error.exception_type) === 'headroom.AdmissionError') outcome = 'rejected';
  else if (status.status_str === undefined && !messages.length) outcome = 'unknown';
  const images = [];
  for (const out of Object.values(obj(e.outputs))) {
    for (const img of arr(obj(out).images)) if (obj(img).filename) images.push(img);
  }
  const mem = obj(e.headroom);
  return {
    promptId,
    number: num(arr(e.prompt)[0]),
    outcome,
    start,
    end,
    duration: start !== null && end !== null ? end - start : null,
    error: str(error.exception_message),
    errorNode: error.node_id ? `${error.node_id} ${str(error.node_type)}` : '',
    images,
    plannedPeak: num(mem.planned_peak),
    measuredPeak: num(mem.measured_peak),
    nodes: obj(mem.nodes),
  };
}

// The node id of a telemetry node name ("3 KSampler" -> "3").
export function nodeIdOf(name) {
  return typeof name === 'string' && name ? name.split(' ')[0] : null;
}

// The running job as messages and vram_update describe it.
export class LiveJob {
  constructor(promptId, startMs = null) {
    this.promptId = promptId;
    this.startMs = startMs;
    this.nodes = new Map();  // id -> {state: 'cached'|'running'|'done', measured, planned}
    this.progress = null;  // {node, value, max}
    this.images = [];
    this.previewUrl = null;
    this.current = null;
    this.plannedPeak = null;  // the job's own plan when it differs from the server's (warning level)
  }

  node(id) {
    if (!this.nodes.has(id)) this.nodes.set(id, {state: null, measured: null, planned: null});
    return this.nodes.get(id);
  }

  cached(ids) {
    for (const id of arr(ids)) this.node(String(id)).state = 'cached';
  }

  executing(id) {
    if (this.current && this.current !== id) this.node(this.current).state = 'done';
    this.current = id;
    if (id) this.node(id).state = 'running';
  }

  // A vram_update while this job runs: the running node's planned and measured peak so far.
  vram(d) {
    const id = nodeIdOf(d.node);
    if (!id) return;
    const n = this.node(id);
    const measured = num(d.node_measured_peak);
    const planned = num(d.node_planned_peak);
    if (measured !== null) n.measured = Math.max(n.measured || 0, measured);
    if (planned !== null && planned > 0) n.planned = planned;
    if (!n.state) n.state = 'running';
  }

  // headroom_node: a node ended, with its exact planned and measured peak.
  nodeEnded(d) {
    const id = d.node === null || d.node === undefined ? null : String(d.node);
    if (!id) return;
    const n = this.node(id);
    const measured = num(d.measured_peak);
    const planned = num(d.planned_peak);
    if (measured !== null) n.measured = measured;
    if (planned !== null) n.planned = planned;
    if (n.state !== 'cached') n.state = 'done';
  }

  executed(id, output) {
    this.node(id).state = 'done';
    for (const img of arr(obj(output).images)) if (obj(img).filename) this.images.push(img);
  }

  setPreview(url) {
    if (this.previewUrl) URL.revokeObjectURL(this.previewUrl);
    this.previewUrl = url;
  }

  dispose() {
    this.setPreview(null);
  }
}

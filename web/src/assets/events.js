// Turns server messages into events on the chart's time axis: job start and end, memory
// decisions (tiling, streaming, batch splits), OOM recoveries, a held queue. Each job's start and
// end is marked once, whether the WebSocket told us (our own jobs) or polling found it (others').
import {shortId, str} from './format.js';

// The kind of a headroom_memory message, from its text.
export function memoryKind(message) {
  const m = str(message);
  if (/allocation failed|out of memory|OOM/i.test(m)) return 'oom';
  return 'memory';
}

export class JobEvents {
  // `board`: where events are marked (vram_board.js: on every device's chart).
  constructor(board, onChange) {
    this.board = board;
    this.onChange = onChange;
    this.started = new Set();
    this.ended = new Set();
  }

  start(promptId, tMs) {
    if (!promptId || this.started.has(promptId)) return;
    this.started.add(promptId);
    this.add('job', `job ${shortId(promptId)} started`, tMs);
  }

  end(promptId, outcome, tMs) {
    if (!promptId || this.ended.has(promptId)) return;
    this.ended.add(promptId);
    this.add(outcome === 'success' ? 'done' : 'failed', `job ${shortId(promptId)} ${outcome}`, tMs);
  }

  memory(data) {
    const node = data.node ? `node ${data.node}: ` : '';
    const kind = memoryKind(data.message);
    const prefix = kind === 'oom' ? 'OOM recovery — ' : '';
    this.add(kind, `${prefix}${node}${str(data.message, 'memory decision')}`);
  }

  add(kind, text, tMs) {
    this.board.mark(kind, text, typeof tMs === 'number' ? tMs : Date.now());
    this.onChange();
  }
}

// The WebSocket /ws?clientId= with reconnection: a visible state (connecting, open,
// reconnecting), a backoff between attempts, and handlers per message type. Malformed messages
// are dropped; a handler that throws does not stop the others.

const BACKOFF_MS = [500, 1000, 2000, 3000, 5000];

export class ServerSocket {
  constructor(clientId) {
    this.clientId = clientId;
    this.handlers = new Map();  // type -> [fn(data, message)]
    this.stateHandlers = [];
    this.state = 'connecting';
    this.attempt = 0;
    this.ws = null;
    this.timer = null;
  }

  on(type, fn) {
    if (!this.handlers.has(type)) this.handlers.set(type, []);
    this.handlers.get(type).push(fn);
    return this;
  }

  // fn(state, attempt) on every change: 'connecting', 'open', 'reconnecting'.
  onState(fn) {
    this.stateHandlers.push(fn);
    return this;
  }

  connect() {
    clearTimeout(this.timer);
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${proto}//${location.host}/ws?clientId=${encodeURIComponent(this.clientId)}`;
    let ws;
    try {
      ws = new WebSocket(url);
    } catch {
      this.retry();
      return;
    }
    ws.binaryType = 'arraybuffer';
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.setState('open');
    };
    ws.onmessage = (ev) => this.dispatch(ev.data);
    ws.onclose = () => {
      if (this.ws === ws) this.retry();
    };
    ws.onerror = () => {};  // onclose follows; the browser already says why
  }

  retry() {
    this.ws = null;
    const delay = BACKOFF_MS[Math.min(this.attempt, BACKOFF_MS.length - 1)];
    this.attempt += 1;
    this.setState('reconnecting');
    this.timer = setTimeout(() => this.connect(), delay);
  }

  setState(state) {
    if (state === this.state && state !== 'reconnecting') return;
    this.state = state;
    for (const fn of this.stateHandlers) fn(state, this.attempt);
  }

  dispatch(raw) {
    if (raw instanceof ArrayBuffer) return this.emit('binary', raw, null);
    let msg;
    try {
      msg = JSON.parse(raw);
    } catch {
      return;
    }
    if (!msg || typeof msg.type !== 'string') return;
    const data = msg.data && typeof msg.data === 'object' ? msg.data : {};
    this.emit(msg.type, data, msg);
    this.emit('*', data, msg);
  }

  emit(type, data, msg) {
    for (const fn of this.handlers.get(type) || []) {
      try {
        fn(data, msg);
      } catch (e) {
        // A bug in one view must not stop the feed; it is reported once per type.
        if (!this.reported) this.reported = new Set();
        if (!this.reported.has(type)) {
          this.reported.add(type);
          console.warn(`dashboard: handler for ${type} failed:`, e);
        }
      }
    }
  }
}

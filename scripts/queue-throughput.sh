#!/usr/bin/env bash
# Throughput of the Redis Streams queue (issue 20, docs/DISTRIBUTED.md): one Redis on loopback, one
# `headroom serve --queue` front, and JOBS SD1.5 text-to-image prompts (the example workflow at
# WIDTHxHEIGHT, STEPS steps, a different seed each) run first by one worker, then by one worker per
# device in DEVICES; prints jobs per minute for each and their ratio.
#
#   bash scripts/queue-throughput.sh                         # here: two CPU workers, tiny model
#   DEVICES=cuda:0,cuda:1 CKPT=sd1-full bash scripts/queue-throughput.sh   # on a two-GPU machine
#
# Needs redis-server on PATH (Debian's; on the GPU machine scripts/device.sh two-gpus unpacks the
# carried .debs first) and a headroom built with hiredis in $BUILD (default build).
#   DEVICES=cpu,cpu  JOBS=8  STEPS=4  WIDTH=256 HEIGHT=256  CKPT=tiny (make-model --size tiny) or
#   sd1-full (make-model --arch sd1 --size full, f16)  BUILD=build  OUT=device-logs  PORT=6391
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${OUT:-device-logs}
DEVICES=${DEVICES:-cpu,cpu}
JOBS=${JOBS:-8}
STEPS=${STEPS:-4}
WIDTH=${WIDTH:-256}
HEIGHT=${HEIGHT:-256}
CKPT=${CKPT:-tiny}
PORT=${PORT:-6391}
B="$BUILD/headroom"
W=$(mktemp -d /tmp/hr_queue.XXXXXX)
mkdir -p "$OUT" "$W/models/checkpoints" "$W/out"
OUT=$(cd "$OUT" && pwd)
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done; wait 2> /dev/null; rm -rf "$W"; }
trap stop_all EXIT

command -v redis-server > /dev/null || { echo "no redis-server on PATH"; exit 1; }
[ -x "$B" ] || { echo "no $B"; exit 1; }
case "$CKPT" in
  tiny) "$B" make-model --arch sd1 --size tiny -o "$W/models/checkpoints/m.safetensors" > /dev/null ;;
  sd1-full) "$B" make-model --arch sd1 --size full -o "$W/models/checkpoints/m.safetensors" > /dev/null ;;
  *) echo "CKPT is tiny or sd1-full"; exit 1 ;;
esac || { echo "make-model failed"; exit 1; }

redis-server --bind 127.0.0.1 --port "$PORT" --save "" --appendonly no --dir "$W" \
  > "$OUT/redis.log" 2>&1 &
pids+=($!)
Q="redis://127.0.0.1:$PORT/0"
for _ in $(seq 50); do redis-cli -p "$PORT" ping > /dev/null 2>&1 && break; sleep 0.1; done

"$B" serve --queue "$Q" --port 0 --models-dir "$W/models" --output-dir "$W/out" \
  --database :memory: > "$OUT/front.log" 2>&1 &
pids+=($!)
front=""
for _ in $(seq 100); do
  front=$(grep -oE "http://127\.0\.0\.1:[0-9]+" "$OUT/front.log" | head -1)
  [ -n "$front" ] && break
  sleep 0.1
done
[ -n "$front" ] || { echo "the front did not start:"; tail -5 "$OUT/front.log"; exit 1; }

workers=()
start_worker() {  # device, index
  "$B" worker --queue "$Q" --device "$1" --models-dir "$W/models" --output-dir "$W/out" \
    --name "w$2-$1" > "$OUT/worker$2.log" 2>&1 &
  pids+=($!)
  workers+=($!)
}

# Submits JOBS prompts through the front and waits until its history holds all of them; prints
# the seconds from the first submission to the last completion.
run_batch() {
  python3 - "$front" "$JOBS" "$STEPS" "$WIDTH" "$HEIGHT" "$1" <<'PY'
import json, sys, time, urllib.request
front, jobs, steps, w, h, tag = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
wf = json.load(open("examples/default_workflow.json"))
wf["4"]["inputs"]["ckpt_name"] = "m.safetensors"
wf["5"]["inputs"].update(width=w, height=h)
wf["3"]["inputs"]["steps"] = steps
def post(path, body):
    req = urllib.request.Request(front + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
t0 = time.time()
ids = []
for i in range(jobs):
    wf["3"]["inputs"]["seed"] = 1000 + i
    wf["9"]["inputs"]["filename_prefix"] = f"{tag}_{i}"
    ids.append(post("/prompt", {"prompt": wf, "client_id": "throughput"})["prompt_id"])
t_submit = time.time() - t0
done, failed, busy = set(), [], []
deadline = t0 + 1800
while len(done) < jobs and time.time() < deadline:
    for pid in ids:
        if pid in done: continue
        hist = json.load(urllib.request.urlopen(f"{front}/history/{pid}", timeout=60))
        if pid in hist:
            done.add(pid)
            st = hist[pid].get("status", {})
            if st.get("status_str") not in (None, "success"): failed.append(pid)
            stamps = {m[0]: m[1].get("timestamp") for m in st.get("messages", []) if len(m) == 2}
            if stamps.get("execution_start") and stamps.get("execution_success"):
                busy.append((stamps["execution_success"] - stamps["execution_start"]) / 1000)
    time.sleep(0.05)
# seconds, done, failed, seconds to submit them all, mean seconds a worker spent on one job
mean_busy = sum(busy) / len(busy) if busy else float("nan")
print(f"{time.time() - t0:.2f} {len(done)} {len(failed)} {t_submit:.2f} {mean_busy:.3f}")
PY
}

echo "queue throughput: $JOBS jobs of ${WIDTH}x${HEIGHT}, $STEPS steps, checkpoint $CKPT; front $front"
IFS=, read -ra devs <<< "$DEVICES"
start_worker "${devs[0]}" 0
sleep 1
warm=$(run_batch warm)  # loads the model on the first worker
echo "warm-up: $warm (s, done, failed, s to submit, mean s per job on a worker)"
one=$(run_batch one)
echo "1 worker (${devs[0]}): $one (s, done, failed, s to submit, mean s per job on a worker)"
for i in $(seq 1 $((${#devs[@]} - 1))); do start_worker "${devs[$i]}" "$i"; done
sleep 1
run_batch warm2 > /dev/null  # every worker loads the model
many=$(run_batch many)
echo "${#devs[@]} workers ($DEVICES): $many (s, done, failed, s to submit, mean s per job on a worker)"
python3 - "$one" "$many" "$JOBS" "${#devs[@]}" <<'PY'
import sys
one, many, jobs, n = sys.argv[1].split(), sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])
t1, tn = float(one[0]), float(many[0])
print(f"jobs per minute: 1 worker {jobs / t1 * 60:.1f}, {n} workers {jobs / tn * 60:.1f}; "
      f"speed-up {t1 / tn:.2f}x (ideal {n}x)")
b1, bn = float(one[4]), float(many[4])
print(f"workers busy: 1 worker {jobs * b1 / t1 * 100:.0f} % of the batch, {n} workers "
      f"{jobs * bn / (n * tn) * 100:.0f} % each on average")
PY

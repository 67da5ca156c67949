// ComfyUI's client flow against `headroom serve`, driven by a ComfyUI client library from npm
// (@stable-canvas/comfyui-client, with the `ws` WebSocket): what an existing ComfyUI script
// does, unchanged. Usage: node comfy_client_flow.test.mjs PATH/TO/headroom
// Starts the server itself on the CPU with a tiny random checkpoint (headroom make-model) and
// ComfyUI's latent2rgb previews on; exits non-zero on the first failed check.
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import WebSocket from "ws";
import { Client } from "@stable-canvas/comfyui-client";

const headroom = path.resolve(process.argv[2] ?? "build/headroom");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "hr-npm-client-"));
const ckpt = "tiny-sd1.safetensors";

function step(name) {
  process.stdout.write(`[client] ${name}\n`);
}

function workflow(steps, text, size = 64) {
  return {
    "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: ckpt } },
    "5": { class_type: "EmptyLatentImage", inputs: { width: size, height: size, batch_size: 1 } },
    "6": { class_type: "CLIPTextEncode", inputs: { text, clip: ["4", 1] } },
    "7": { class_type: "CLIPTextEncode", inputs: { text: "", clip: ["4", 1] } },
    "3": {
      class_type: "KSampler",
      inputs: {
        seed: 7, steps, cfg: 7.0, sampler_name: "euler", scheduler: "normal", denoise: 1.0,
        model: ["4", 0], positive: ["6", 0], negative: ["7", 0], latent_image: ["5", 0],
      },
    },
    "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
    "9": { class_type: "SaveImage", inputs: { filename_prefix: "npm", images: ["8", 0] } },
  };
}

// Starts the server on a free port; resolves with {proc, port} once it listens.
function serverStart() {
  const args = [
    "serve", "--port", "0", "--device", process.env.HEADROOM_CLIENT_DEVICE || "cpu", "--threads", "2",
    "--models-dir", path.join(dir, "models"), "--output-dir", path.join(dir, "output"),
    "--input-dir", path.join(dir, "input"), "--temp-dir", path.join(dir, "temp"),
    "--database", ":memory:", "--preview-method", "latent2rgb",
  ];
  const proc = spawn(headroom, args, { stdio: ["ignore", "inherit", "pipe"] });
  return new Promise((resolve, reject) => {
    let log = "";
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on("data", (d) => {
      log += d;
      process.stderr.write(d);
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]) });
      }
    });
    proc.on("exit", (code) => reject(new Error(`server exited with ${code}:\n${log}`)));
  });
}

async function main() {
  fs.mkdirSync(path.join(dir, "models", "checkpoints"), { recursive: true });
  execFileSync(headroom, ["make-model", "--arch", "sd1", "--size", "tiny", "--seed", "0", "-o",
    path.join(dir, "models", "checkpoints", ckpt)], { stdio: "inherit" });
  const { proc, port } = await serverStart();
  const client = new Client({ api_host: `127.0.0.1:${port}`, clientId: "npm-client", WebSocket, fetch });
  try {
    step("GET /system_stats, /object_info, /embeddings, /extensions through the library");
    const stats = await client.getSystemStats();
    assert.ok(Array.isArray(stats.devices) && stats.devices.length >= 1, "devices[]");
    for (const k of ["vram_total", "vram_free", "torch_vram_total", "torch_vram_free"])
      assert.equal(typeof stats.devices[0][k], "number", k);
    const defs = await client.getNodeDefs();
    assert.ok(defs.KSampler && defs.KSampler.input.required.sampler_name, "KSampler in object_info");
    assert.ok(Array.isArray(await client.getEmbeddings()));
    assert.ok(Array.isArray(await client.getExtensions()));

    step("connect the WebSocket; enqueue a prompt and wait for its outputs");
    assert.equal(await client.connect({ timeout_ms: 10000 }), true, "WebSocket connects");
    const progress = [];
    let previews = 0;
    client.on("progress", (d) => progress.push(d));
    client.on("b_preview", (blob) => {
      assert.equal(blob.type, "image/png");
      previews += 1;
    });
    const out = await client.enqueue(workflow(3, "a red circle"), { timeout_ms: 120000 });
    assert.ok(out.prompt_id, "prompt_id");
    // The library lists the saved image as a /view URL and, like every image that came over
    // the WebSocket, each binary preview as a buffer.
    const urls = out.images.filter((i) => i.type === "url");
    const buffers = out.images.filter((i) => i.type === "buff");
    assert.equal(urls.length, 1, "one saved image");
    assert.match(urls[0].data, /\/view\?/);
    const bytes = Buffer.from(await (await fetch(urls[0].data)).arrayBuffer());
    assert.equal(bytes.subarray(1, 4).toString(), "PNG", "the output is a PNG");
    assert.equal(buffers.length, 3, "the previews, one per step");
    for (const b of buffers) assert.equal(Buffer.from(b.data).subarray(1, 4).toString(), "PNG");
    assert.deepEqual(progress.map((p) => p.value), [1, 2, 3], "progress per step");
    assert.equal(previews, 3, "one binary preview frame per step");

    step("GET /history through the library");
    const byId = async (id) => (await client.getHistory()).History.find((h) => h.prompt[1] === id);
    const item = await byId(out.prompt_id);
    assert.ok(item, "the prompt is in the history");
    assert.equal(item.status.status_str, "success");
    assert.equal(item.status.completed, true);
    assert.equal(item.outputs["9"].images[0].type, "output");

    step("a prompt that fails validation is refused with ComfyUI's node_errors");
    const bad = workflow(3, "x");
    bad["3"].inputs.sampler_name = "no-such-sampler";
    await assert.rejects(client.enqueue(bad, { timeout_ms: 20000 }), /400 Bad Request/);
    // The library reports only the status; ComfyUI's body is what its frontend shows.
    const raw = await fetch(`http://127.0.0.1:${port}/prompt`, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ prompt: bad, client_id: "npm-client" }),
    });
    const body = await raw.json();
    assert.equal(raw.status, 400);
    assert.equal(body.error.type, "prompt_outputs_failed_validation");
    assert.equal(body.node_errors["3"].errors[0].type, "value_not_in_list");

    step("interrupt a long prompt after its first step; the next prompt runs");
    let interrupted = false;
    client.on("execution_interrupted", () => { interrupted = true; });
    const long = client._enqueue_prompt(workflow(400, "a blue star", 64));
    const { prompt_id: longId } = await long;
    await new Promise((resolve) => {
      const onProgress = (d) => {
        if (d.prompt_id === longId) {
          client.off?.("progress", onProgress);
          resolve();
        }
      };
      client.on("progress", onProgress);
    });
    await client.interrupt();
    const next = await client.enqueue(workflow(1, "a green ring"), { timeout_ms: 120000 });
    assert.equal(next.images.filter((i) => i.type === "url").length, 1,
      "the prompt after the interrupted one runs");
    assert.equal(interrupted, true, "execution_interrupted reached the client");
    assert.equal((await byId(longId)).status.status_str, "error", "the interrupted prompt is an error");

    step("queue and history clear, /free through the library");
    await client.free({ unload_models: true, free_memory: true });
    await client.clearItems("history");
    assert.deepEqual((await client.getHistory()).History, []);
    const q = await client.getQueue();
    assert.equal(q.Running.length + q.Pending.length, 0);
    step("all checks passed");
  } finally {
    client.close();
    proc.kill("SIGTERM");
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`[client] FAILED: ${e.stack ?? e}`);
    process.exit(1);
  },
);

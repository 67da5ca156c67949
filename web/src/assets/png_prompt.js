// The API-format workflow a PNG carries: ComfyUI and headroom write it as a text chunk named
// "prompt" (tEXt; iTXt and zTXt are read too).

const SIGNATURE = [137, 80, 78, 71, 13, 10, 26, 10];

async function inflate(bytes) {
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

// The text of chunk `type`'s data for `keyword`, or null.
async function chunkText(type, data) {
  const nul = data.indexOf(0);
  if (nul < 0) return null;
  const keyword = new TextDecoder('latin1').decode(data.subarray(0, nul));
  if (keyword !== 'prompt') return null;
  if (type === 'tEXt') return new TextDecoder('latin1').decode(data.subarray(nul + 1));
  if (type === 'zTXt') return new TextDecoder('latin1').decode(await inflate(data.subarray(nul + 2)));
  // iTXt: keyword, 0, compression flag, method, language tag, 0, translated keyword, 0, text
  const compressed = data[nul + 1] === 1;
  let i = nul + 3;
  for (let zeros = 0; zeros < 2 && i < data.length; i += 1) if (data[i] === 0) zeros += 1;
  const text = data.subarray(i);
  return new TextDecoder('utf-8').decode(compressed ? await inflate(text) : text);
}

// The workflow object from a PNG file's bytes; throws with a reason when there is none.
export async function pngPrompt(buffer) {
  const b = new Uint8Array(buffer);
  if (b.length < 8 || SIGNATURE.some((v, i) => b[i] !== v)) throw new Error('not a PNG file');
  const view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  for (let pos = 8; pos + 8 <= b.length;) {
    const len = view.getUint32(pos);
    const type = String.fromCharCode(...b.subarray(pos + 4, pos + 8));
    const data = b.subarray(pos + 8, pos + 8 + len);
    if (type === 'tEXt' || type === 'iTXt' || type === 'zTXt') {
      const text = await chunkText(type, data);
      if (text !== null) return JSON.parse(text);
    }
    if (type === 'IEND') break;
    pos += 12 + len;
  }
  throw new Error('this PNG carries no "prompt" text chunk');
}

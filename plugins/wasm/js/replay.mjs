// Replays recorded kernel calls on the provider's kernels.wasm with the host's own WebAssembly
// engine (V8 in Node and in Chromium) and returns the SHA-256 of the memory each call leaves.
//
// A case is what onnxplug's Python host did right before one dispatch() under wasmtime: the
// bytes of the used heap (parameters and tensors) at `offset`, and the 16 kernel_args slots.
// WebAssembly arithmetic is deterministic (this module uses no relaxed SIMD), so every engine
// must leave exactly the bytes wasmtime left; the Python side compares the digests.

function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

async function sha256(bytes) {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
}

export async function replay(moduleBytes, cases) {
  const module = await WebAssembly.compile(moduleBytes);
  const results = [];
  for (const c of cases) {
    const instance = await WebAssembly.instantiate(module, {});
    const { memory, dispatch, kernel_args_ptr } = instance.exports;
    const before = fromBase64(c.before);
    const end = c.offset + before.length;
    if (end > memory.buffer.byteLength) memory.grow(Math.ceil((end - memory.buffer.byteLength) / 65536));
    new Uint8Array(memory.buffer, c.offset, before.length).set(before);
    new Int32Array(memory.buffer, kernel_args_ptr(), c.args.length).set(c.args);
    const status = dispatch();
    const after = new Uint8Array(memory.buffer, c.offset, before.length).slice();
    results.push({ name: c.name, status, sha256: await sha256(after) });
  }
  return results;
}

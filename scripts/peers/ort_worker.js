#!/usr/bin/env node
// ONNX Runtime FP32 (CPU, through onnxruntime-node) as a contender of `make bench-peers`.
//
// Usage: node ort_worker.js MODEL.onnx INPUT.npy THREADS [REF.npy] [WARMUP] [STREAM_JSON]
//
// With STREAM_JSON ({"sr": 16000, "state": [{"name", "shape", "out"}], "context": 64}: a
// stateful streaming model such as Silero VAD), INPUT.npy holds the ordered chunks and every
// call takes the next chunk, the sample rate as an int64 and the state tensors the previous
// call returned (zeros at the start), with the last "context" samples of the previous call's
// input before the chunk, as the model's authors feed their ONNX file (OnnxWrapper); at the end
// of the stream the state is zeroed, untimed. The ready line gives max_abs_vs_ref over the
// whole stream run from zero state.
//
// Session options as an ONNX Runtime user sets them for one request at a time: intra-op
// threads = THREADS, one inter-op thread, sequential execution, all graph optimizations.
// Speaks the protocol of torch_worker.py and `torchspeed bench --serve`: "ready {json}", then
// "run K" -> "ns" and K latencies in nanoseconds (after one untimed run), "quit" stops it.
'use strict';

const fs = require('fs');
const readline = require('readline');
const ort = require('onnxruntime-node');

// readNpy reads a little-endian float32, int64 or int32 C-order .npy file (what the fixtures
// hold); anything else is refused by name.
function readNpy(path) {
  const b = fs.readFileSync(path);
  if (b.toString('latin1', 0, 6) !== '\x93NUMPY') throw new Error(`${path}: not a .npy file`);
  const major = b[6];
  const hlen = major === 1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = (major === 1 ? 10 : 12);
  const header = b.toString('latin1', start, start + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header);
  if (!descr || !shape || /'fortran_order':\s*True/.test(header)) throw new Error(`${path}: unsupported npy header ${header.trim()}`);
  const dims = shape[1].split(',').map((s) => s.trim()).filter((s) => s).map(Number);
  const data = b.subarray(start + hlen);
  const copy = (Ctor) => new Ctor(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength));
  switch (descr[1]) {
    case '<f4': return new ort.Tensor('float32', copy(Float32Array), dims);
    case '<i8': return new ort.Tensor('int64', copy(BigInt64Array), dims);
    case '<i4': return new ort.Tensor('int32', copy(Int32Array), dims);
    default: throw new Error(`${path}: dtype ${descr[1]} not supported here (want <f4, <i8 or <i4)`);
  }
}

function cosine(a, b) {
  let ab = 0; let aa = 0; let bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / (Math.sqrt(aa) * Math.sqrt(bb) + 1e-30);
}

// Stream calls a streaming model on the chunks of a [calls, 1, n] tensor in order, carrying
// its state tensors and context between calls.
class Stream {
  constructor(session, chunks, spec) {
    this.session = session;
    this.spec = spec;
    this.input = session.inputNames[0];
    if (chunks.dims.length !== 3 || chunks.dims[1] !== 1 || chunks.type !== 'float32') {
      throw new Error(`stream input: want float32 chunks [calls, 1, samples], got ${chunks.type} [${chunks.dims}]`);
    }
    const [calls, , n] = chunks.dims;
    this.ctx = spec.context || 0;
    this.chunks = [];
    for (let i = 0; i < calls; i++) this.chunks.push(chunks.data.subarray(i * n, (i + 1) * n));
    this.n = n;
    this.sr = new ort.Tensor('int64', BigInt64Array.from([BigInt(spec.sr)]), []);
    this.reset();
  }

  reset() {
    this.pos = 0;
    this.prev = new Float32Array(this.ctx + this.n);
    this.state = {};
    for (const s of this.spec.state) {
      this.state[s.name] = new ort.Tensor('float32', new Float32Array(s.shape.reduce((a, b) => a * b, 1)), s.shape);
    }
  }

  async call() {
    if (this.pos === this.chunks.length) this.reset();
    const x = new Float32Array(this.ctx + this.n);
    x.set(this.prev.subarray(this.prev.length - this.ctx), 0);
    x.set(this.chunks[this.pos], this.ctx);
    const feeds = { [this.input]: new ort.Tensor('float32', x, [1, this.ctx + this.n]), sr: this.sr, ...this.state };
    const out = await this.session.run(feeds);
    for (const s of this.spec.state) this.state[s.name] = out[s.out];
    this.prev = x;
    this.pos++;
    return out[this.session.outputNames[0]];
  }

  async maxAbsVs(ref) {
    this.reset();
    let worst = 0;
    for (let i = 0; i < this.chunks.length; i++) {
      const y = await this.call();
      worst = Math.max(worst, Math.abs(y.data[0] - ref.data[i]));
    }
    return worst;
  }
}

async function streamMain(modelPath, inputPath, threads, refPath, warmup, spec) {
  const t0 = process.hrtime.bigint();
  let st; let err;
  try {
    const session = await ort.InferenceSession.create(modelPath, {
      intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential',
      graphOptimizationLevel: 'all', executionProviders: ['cpu'],
    });
    st = new Stream(session, readNpy(inputPath), spec);
    if (refPath) err = await st.maxAbsVs(readNpy(refPath));
    st.reset();
    for (let i = 0; i < warmup; i++) await st.call();
  } catch (e) {
    console.log(`error ${String(e.message || e).replace(/\s+/g, ' ').slice(0, 600)}`);
    process.exit(1);
  }
  const info = {
    runtime: 'onnxruntime-node', version: require('onnxruntime-node/package.json').version, threads,
    execution_mode: 'sequential', setup_s: Number(process.hrtime.bigint() - t0) / 1e9, stream_calls: st.chunks.length,
  };
  if (err !== undefined) info.max_abs_vs_ref = err;
  console.log('ready ' + JSON.stringify(info));
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of rl) {
    const f = line.trim().split(/\s+/);
    if (f.length === 1 && f[0] === 'quit') break;
    const k = f.length === 2 && f[0] === 'run' ? Number(f[1]) : 0;
    if (!(Number.isInteger(k) && k >= 1)) {
      console.log(`error ${JSON.stringify(line.trim())}: want "run K" with K >= 1, or "quit"`);
      continue;
    }
    await st.call();
    const ns = new Array(k);
    for (let i = 0; i < k; i++) {
      if (st.pos === st.chunks.length) st.reset();
      const t = process.hrtime.bigint();
      await st.call();
      ns[i] = process.hrtime.bigint() - t;
    }
    console.log('ns ' + ns.join(' '));
  }
  process.exit(0);
}

async function main() {
  const [modelPath, inputPath, threadsArg, refPath, warmupArg, streamArg] = process.argv.slice(2);
  if (streamArg) {
    let spec;
    try {
      spec = JSON.parse(streamArg);
      if (!Number.isInteger(spec.sr) || !Array.isArray(spec.state)) throw new Error('want {"sr": int, "state": [...]}');
    } catch (e) {
      console.log(`error STREAM_JSON ${JSON.stringify(streamArg).slice(0, 200)}: ${e.message}`);
      process.exit(1);
    }
    await streamMain(modelPath, inputPath, Number(threadsArg), refPath, Math.max(1, Number(warmupArg || 10)), spec);
    return;
  }
  const threads = Number(threadsArg);
  const warmup = Math.max(1, Number(warmupArg || 10));
  const t0 = process.hrtime.bigint();
  let session; let feeds; let out;
  try {
    session = await ort.InferenceSession.create(modelPath, {
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      executionMode: 'sequential',
      graphOptimizationLevel: 'all',
      executionProviders: ['cpu'],
    });
    feeds = { [session.inputNames[0]]: readNpy(inputPath) };
    for (let i = 0; i < warmup; i++) out = await session.run(feeds);
  } catch (e) {
    console.log(`error ${String(e.message || e).replace(/\s+/g, ' ').slice(0, 600)}`);
    process.exit(1);
  }
  const info = {
    runtime: 'onnxruntime-node', version: require('onnxruntime-node/package.json').version,
    threads, execution_mode: 'sequential', setup_s: Number(process.hrtime.bigint() - t0) / 1e9,
  };
  if (refPath) info.cosine_vs_fp32 = cosine(out[session.outputNames[0]].data, readNpy(refPath).data);
  console.log('ready ' + JSON.stringify(info));
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  for await (const line of rl) {
    const f = line.trim().split(/\s+/);
    if (f.length === 1 && f[0] === 'quit') break;
    const k = f.length === 2 && f[0] === 'run' ? Number(f[1]) : 0;
    if (!(Number.isInteger(k) && k >= 1)) {
      console.log(`error ${JSON.stringify(line.trim())}: want "run K" with K >= 1, or "quit"`);
      continue;
    }
    await session.run(feeds);
    const ns = new Array(k);
    for (let i = 0; i < k; i++) {
      const t = process.hrtime.bigint();
      await session.run(feeds);
      ns[i] = process.hrtime.bigint() - t;
    }
    console.log('ns ' + ns.join(' '));
  }
  process.exit(0);
}

main();

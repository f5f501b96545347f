#!/usr/bin/env node
// A signed SW4RM call from outside Go (§6.2), using nothing but Node's built-in http2 and
// crypto: it hand-encodes a small protobuf request, builds the signing pre-image exactly as
// docs/signing.md specifies, signs it with Ed25519 and makes a unary gRPC call over
// cleartext HTTP/2 (h2c). It proves the mechanism needs no Go and no protobuf library.
//
// Usage:
//   node signed_call.mjs --vector protocol/signing/testdata/vectors.json
//       Recomputes every vector (public key, pre-image, signature; for a complete call also
//       the request's encoding, its gRPC frame and its metadata) and exits 1 on a mismatch.
//   node signed_call.mjs --addr HOST:PORT --agent AGENT_ID (--seed-hex HEX | --seed-file PATH)
//                        [--method /pkg.Service/Method] [--body-hex HEX] [--tamper-body]
//                        [--timeout-ms N]
//       Calls METHOD (default /sw4rm.registry.RegistryService/Heartbeat) with BODY (default
//       sw4rm.registry.HeartbeatRequest{agent_id: AGENT_ID}), signed as AGENT_ID with the key
//       of the 32-byte seed (a key file holds it in hex on one line). --tamper-body changes the
//       body after signing, as a man in the middle would. Prints the call's outcome:
//           grpc-status: <code>
//           grpc-message: <text>
//           response-hex: <the first response message, hex>
//       and exits 0 once a grpc-status arrived (whatever it is), 2 if none did.

import { createHash, createPrivateKey, createPublicKey, randomBytes, sign, verify } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http2 from 'node:http2';
import { pathToFileURL } from 'node:url';

const VERSION = 'sw4rm-sig-v1';
const HEARTBEAT = '/sw4rm.registry.RegistryService/Heartbeat';

// --- Ed25519 from a 32-byte seed -------------------------------------------------------------

// PKCS#8 DER of an Ed25519 private key is this fixed 16-byte prefix followed by the seed.
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

export function keyFromSeed(seed) {
  if (seed.length !== 32) throw new Error(`an Ed25519 seed is 32 bytes, not ${seed.length}`);
  const privateKey = createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: 'der', type: 'pkcs8' });
  const publicKey = createPublicKey(privateKey);
  // The SPKI DER of an Ed25519 key ends with the raw 32-byte public key.
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(-32);
  return { privateKey, publicKey, raw };
}

export function parseSeed(text) {
  const t = text.trim();
  if (/^[0-9a-fA-F]{64}$/.test(t)) return Buffer.from(t, 'hex');
  const b = Buffer.from(t.replace(/-/g, '+').replace(/_/g, '/'), 'base64');
  if (b.length === 32) return b;
  throw new Error('the seed must be 32 bytes in hex (64 digits) or base64');
}

// --- The signing mechanism (protocol/signing) --------------------------------------------------

// preimage is six lines, each ended by "\n": the version, the full gRPC method, the agent id,
// the Unix time in milliseconds, the nonce, and the lower-case hex SHA-256 of the request's
// bytes exactly as sent.
export function preimage({ method, agentId, timestampMs, nonce, body }) {
  const digest = createHash('sha256').update(body).digest('hex');
  return Buffer.from([VERSION, method, agentId, String(timestampMs), nonce, digest].map((l) => l + '\n').join(''), 'utf8');
}

export function signCall(privateKey, call) {
  // Ed25519 takes no separate digest algorithm: null.
  const signature = sign(null, preimage(call), privateKey).toString('base64url');
  return {
    'sw4rm-agent': call.agentId,
    'sw4rm-timestamp': String(call.timestampMs),
    'sw4rm-nonce': call.nonce,
    'sw4rm-signature': signature,
  };
}

// --- Protobuf, by hand ---------------------------------------------------------------------------

export function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let byte = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) byte |= 0x80;
    out.push(byte);
  } while (v > 0n);
  return Buffer.from(out);
}

// stringField is a length-delimited field (wire type 2).
export function stringField(number, value) {
  const bytes = Buffer.from(value, 'utf8');
  return Buffer.concat([varint((number << 3) | 2), varint(bytes.length), bytes]);
}

// varintField is a varint field (wire type 0); proto3 leaves out the zero value.
function varintField(number, value) {
  return value ? Buffer.concat([varint(number << 3), varint(value)]) : Buffer.alloc(0);
}

// The requests this client can encode, in field-number order (proto/sw4rm/*.proto; the wire
// contract lists the same numbers).
const ENCODERS = {
  // HeartbeatRequest: agent_id = 1 (string), state = 2 (AgentState, an enum).
  'sw4rm.registry.HeartbeatRequest': (f) => Buffer.concat([f.agent_id ? stringField(1, f.agent_id) : Buffer.alloc(0), varintField(2, f.state ?? 0)]),
  // DeregisterAgentRequest: agent_id = 1, reason = 2 (strings).
  'sw4rm.registry.DeregisterAgentRequest': (f) =>
    Buffer.concat([f.agent_id ? stringField(1, f.agent_id) : Buffer.alloc(0), f.reason ? stringField(2, f.reason) : Buffer.alloc(0)]),
};

export function encodeRequest(type, fields) {
  const enc = ENCODERS[type];
  if (!enc) throw new Error(`no encoder for ${type}`);
  return enc(fields);
}

// grpcFrame is gRPC's length-prefixed message: a compression flag (0: none), the 4-byte
// big-endian length, the message.
function grpcFrame(body) {
  const prefix = Buffer.alloc(5);
  prefix.writeUInt8(0, 0);
  prefix.writeUInt32BE(body.length, 1);
  return Buffer.concat([prefix, body]);
}

// --- --vector ------------------------------------------------------------------------------------

function checkVectors(path) {
  const vectors = JSON.parse(readFileSync(path, 'utf8'));
  if (!Array.isArray(vectors) || vectors.length === 0) throw new Error(`${path}: no vectors`);
  const failures = [];
  vectors.forEach((v, i) => {
    const fail = (what, got, want) => failures.push(`vector ${i}: ${what}: computed ${JSON.stringify(got)}, the vector says ${JSON.stringify(want)}`);
    const key = keyFromSeed(Buffer.from(v.seed_hex, 'hex'));
    if (key.raw.toString('hex') !== v.public_key_hex) fail('public key', key.raw.toString('hex'), v.public_key_hex);
    let body = Buffer.from(v.body_hex, 'hex');
    if (v.request) {
      const encoded = encodeRequest(v.request.type, v.request.fields);
      if (encoded.toString('hex') !== v.body_hex) fail(`the encoding of ${v.request.type}`, encoded.toString('hex'), v.body_hex);
      body = encoded;
      const frame = grpcFrame(body).toString('hex');
      if (frame !== v.grpc_frame_hex) fail('gRPC frame', frame, v.grpc_frame_hex);
    }
    const call = { method: v.method, agentId: v.agent_id, timestampMs: v.timestamp_ms, nonce: v.nonce, body };
    const pre = preimage(call).toString('utf8');
    if (pre !== v.preimage) fail('pre-image', pre, v.preimage);
    const md = signCall(key.privateKey, call);
    if (md['sw4rm-signature'] !== v.signature_b64url) fail('signature', md['sw4rm-signature'], v.signature_b64url);
    if (!verify(null, Buffer.from(v.preimage, 'utf8'), key.publicKey, Buffer.from(v.signature_b64url, 'base64url'))) {
      failures.push(`vector ${i}: the vector's signature does not verify over its pre-image`);
    }
    if (v.metadata) {
      for (const [k, want] of Object.entries(v.metadata)) if (md[k] !== want) fail(`metadata ${k}`, md[k], want);
      for (const k of Object.keys(md)) if (!(k in v.metadata)) fail(`metadata ${k}`, md[k], undefined);
    }
  });
  if (failures.length > 0) {
    for (const f of failures) console.error('MISMATCH', f);
    process.exit(1);
  }
  console.log(`ok: ${vectors.length} vectors reproduced`);
}

// --- A call over h2c -----------------------------------------------------------------------------

function call({ addr, method, metadata, body, timeoutMs }) {
  return new Promise((resolve, reject) => {
    const client = http2.connect(`http://${addr}`);
    const timer = setTimeout(() => {
      client.destroy();
      reject(new Error(`no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    client.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    const req = client.request({
      ':method': 'POST',
      ':path': method,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...metadata,
    });
    let status;
    let message = '';
    const data = [];
    const take = (headers) => {
      if (headers['grpc-status'] !== undefined) {
        status = String(headers['grpc-status']);
        message = headers['grpc-message'] ? decodeMessage(String(headers['grpc-message'])) : '';
      }
    };
    req.on('response', take); // a trailers-only answer carries the status here
    req.on('trailers', take);
    req.on('data', (chunk) => data.push(chunk));
    req.on('error', (err) => {
      clearTimeout(timer);
      client.close();
      reject(err);
    });
    req.on('end', () => {
      clearTimeout(timer);
      client.close();
      if (status === undefined) {
        reject(new Error('the answer carried no grpc-status'));
        return;
      }
      resolve({ status, message, response: firstMessage(Buffer.concat(data)) });
    });
    req.end(grpcFrame(body));
  });
}

// grpc-message is percent-encoded (gRPC over HTTP/2).
function decodeMessage(s) {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function firstMessage(buf) {
  if (buf.length < 5) return Buffer.alloc(0);
  return buf.subarray(5, 5 + buf.readUInt32BE(1));
}

// --- main ----------------------------------------------------------------------------------------

function parseArgs(argv) {
  const flags = { tamperBody: false };
  const needs = new Set(['--vector', '--addr', '--agent', '--seed-hex', '--seed-file', '--method', '--body-hex', '--timeout-ms']);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--tamper-body') {
      flags.tamperBody = true;
    } else if (needs.has(a)) {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      flags[a.slice(2)] = argv[++i];
    } else {
      throw new Error(`unknown argument ${a}`);
    }
  }
  return flags;
}

async function main() {
  const f = parseArgs(process.argv.slice(2));
  if (f.vector) {
    checkVectors(f.vector);
    return;
  }
  if (!f.addr || !f.agent || (!f['seed-hex'] && !f['seed-file'])) {
    throw new Error('want --vector FILE, or --addr HOST:PORT --agent ID and --seed-hex HEX or --seed-file PATH');
  }
  const seed = parseSeed(f['seed-hex'] ?? readFileSync(f['seed-file'], 'utf8'));
  const key = keyFromSeed(seed);
  const method = f.method ?? HEARTBEAT;
  let body = f['body-hex'] !== undefined ? Buffer.from(f['body-hex'], 'hex') : encodeRequest('sw4rm.registry.HeartbeatRequest', { agent_id: f.agent });
  const c = { method, agentId: f.agent, timestampMs: Date.now(), nonce: randomBytes(16).toString('base64url'), body };
  const metadata = signCall(key.privateKey, c);
  if (f.tamperBody) {
    body = Buffer.from(body);
    if (body.length === 0) body = Buffer.from([0]);
    else body[body.length - 1] ^= 0x01;
  }
  const res = await call({ addr: f.addr, method, metadata, body, timeoutMs: Number(f['timeout-ms'] ?? 10000) });
  console.log(`grpc-status: ${res.status}`);
  console.log(`grpc-message: ${res.message}`);
  console.log(`response-hex: ${res.response.toString('hex')}`);
}

// Run as a program, not when signed_call_connect.mjs imports the functions above.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err) => {
    console.error(`signed_call: ${err.message}`);
    process.exit(2);
  });
}

#!/usr/bin/env node
// A signed SW4RM call over the Connect protocol and HTTP/1.1 (§5.1's fallback, §6.2), using
// nothing but Node's built-in http and crypto: signed_call.mjs's signing functions, and a
// Connect unary call, which is one HTTP POST whose body is the request message, JSON or
// binary protobuf. The four sw4rm-* entries travel as HTTP headers, and the digest covers the
// whole request body exactly as sent (docs/signing.md, "Over Connect and gRPC-Web") — for
// JSON, the JSON text's bytes, never a protobuf re-encoding of it.
//
// Usage:
//   node signed_call_connect.mjs --addr HOST:PORT --agent AGENT_ID (--seed-hex HEX | --seed-file PATH)
//        [--register] [--method /pkg.Service/Method] [--format json|proto]
//        [--body TEXT | --body-hex HEX] [--tamper-body] [--unsigned] [--timeout-ms N]
//       Calls METHOD (default /sw4rm.registry.RegistryService/Heartbeat) with BODY (default
//       HeartbeatRequest{agent_id: AGENT_ID}, as {"agentId":"AGENT_ID"} in JSON or its
//       protobuf encoding), signed as AGENT_ID with the key of the 32-byte seed. --register
//       calls RegisterAgent instead, with a descriptor that carries the key's public key: the
//       first registration of an agent id claims it, signed with the key it registers.
//       --tamper-body changes the body after signing, as a man in the middle would (JSON gets
//       a trailing space, protobuf its last byte flipped);
//       --unsigned sends no signature. Prints the call's outcome:
//           http-status: <status>
//           connect-code: <ok, or the Connect error code: unauthenticated, ...>
//           connect-message: <the error's message>
//           sw4rm-error-code: <the error table's code, when the server sent one>
//           response: <the response body: JSON text, or hex of binary protobuf>
//       and exits 0 once a response arrived (whatever it says), 2 if none did.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';

import { encodeRequest, keyFromSeed, parseSeed, signCall, stringField, varint } from './signed_call.mjs';

const HEARTBEAT = '/sw4rm.registry.RegistryService/Heartbeat';
const REGISTER = '/sw4rm.registry.RegistryService/RegisterAgent';

// bytesField is a length-delimited field (wire type 2) of raw bytes.
function bytesField(number, bytes) {
  return Buffer.concat([varint((number << 3) | 2), varint(bytes.length), bytes]);
}

// registerBody is RegisterAgentRequest{agent: AgentDescriptor{agent_id, name, public_key}}:
// in JSON with proto3's JSON names (bytes in base64), or in protobuf, field 1 of the request
// holding the descriptor's fields 1, 2 and 8.
function registerBody(format, agentId, publicKey) {
  if (format === 'json') {
    return Buffer.from(JSON.stringify({ agent: { agentId, name: 'node-connect', publicKey: publicKey.toString('base64') } }), 'utf8');
  }
  const descriptor = Buffer.concat([stringField(1, agentId), stringField(2, 'node-connect'), bytesField(8, publicKey)]);
  return bytesField(1, descriptor);
}

function heartbeatBody(format, agentId) {
  if (format === 'json') return Buffer.from(JSON.stringify({ agentId }), 'utf8');
  return encodeRequest('sw4rm.registry.HeartbeatRequest', { agent_id: agentId });
}

// connectUnary POSTs body to the method's path, the Connect unary call: the Content-Type names
// the codec, Connect-Protocol-Version: 1 marks the protocol, and the answer is the response
// message with HTTP 200, or an error as JSON {"code", "message"} with another status.
function connectUnary({ addr, method, format, headers, body, timeoutMs }) {
  return new Promise((resolve, reject) => {
    const req = http.request(`http://${addr}${method}`, {
      method: 'POST',
      headers: {
        'content-type': format === 'json' ? 'application/json' : 'application/proto',
        'connect-protocol-version': '1',
        'connect-timeout-ms': String(timeoutMs),
        'content-length': body.length,
        ...headers,
      },
      timeout: timeoutMs,
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.on('response', (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) }));
    });
    req.end(body);
  });
}

function parseArgs(argv) {
  const flags = { tamperBody: false, unsigned: false, register: false };
  const switches = { '--tamper-body': 'tamperBody', '--unsigned': 'unsigned', '--register': 'register' };
  const needs = new Set(['--addr', '--agent', '--seed-hex', '--seed-file', '--method', '--format', '--body', '--body-hex', '--timeout-ms']);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (switches[a]) {
      flags[switches[a]] = true;
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
  if (!f.addr || !f.agent || (!f['seed-hex'] && !f['seed-file'])) {
    throw new Error('want --addr HOST:PORT --agent ID and --seed-hex HEX or --seed-file PATH');
  }
  const format = f.format ?? 'json';
  if (format !== 'json' && format !== 'proto') throw new Error(`--format is json or proto, not ${format}`);
  const key = keyFromSeed(parseSeed(f['seed-hex'] ?? readFileSync(f['seed-file'], 'utf8')));
  const method = f.method ?? (f.register ? REGISTER : HEARTBEAT);
  let body;
  if (f.body !== undefined) body = Buffer.from(f.body, 'utf8');
  else if (f['body-hex'] !== undefined) body = Buffer.from(f['body-hex'], 'hex');
  else if (f.register) body = registerBody(format, f.agent, key.raw);
  else body = heartbeatBody(format, f.agent);

  // Serialize once, sign those bytes, send those bytes.
  const headers = f.unsigned
    ? {}
    : signCall(key.privateKey, { method, agentId: f.agent, timestampMs: Date.now(), nonce: randomBytes(16).toString('base64url'), body });
  if (f.tamperBody) {
    if (format === 'json') {
      // A trailing space: the same message in other bytes, so the JSON still decodes and
      // only the signature can refuse it.
      body = Buffer.concat([body, Buffer.from(' ')]);
    } else {
      body = Buffer.from(body);
      if (body.length === 0) body = Buffer.from([0]);
      else body[body.length - 1] ^= 0x01;
    }
  }
  const res = await connectUnary({ addr: f.addr, method, format, headers, body, timeoutMs: Number(f['timeout-ms'] ?? 10000) });
  let code = 'ok';
  let message = '';
  if (res.status !== 200) {
    try {
      const e = JSON.parse(res.body.toString('utf8'));
      code = e.code ?? 'unknown';
      message = e.message ?? '';
    } catch {
      code = 'unknown';
      message = res.body.toString('utf8');
    }
  }
  // A unary Connect answer carries the call's trailers as headers prefixed with trailer-.
  const errorCode = res.headers['trailer-sw4rm-error-code'] ?? res.headers['sw4rm-error-code'] ?? '';
  const json = res.status !== 200 || format === 'json';
  console.log(`http-status: ${res.status}`);
  console.log(`connect-code: ${code}`);
  console.log(`connect-message: ${message}`);
  console.log(`sw4rm-error-code: ${errorCode}`);
  console.log(`response: ${json ? res.body.toString('utf8') : res.body.toString('hex')}`);
}

main().catch((err) => {
  console.error(`signed_call_connect: ${err.message}`);
  process.exit(2);
});

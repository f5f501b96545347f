// Writes dist/inputs.sha256: one digest of everything the generated code and the bundle are
// made from (the .proto files of proto/, src/, index.html excluded as the test serves it as
// it is, and the pinned tools). The browser test recomputes it, so a change to any input
// without `make browser-bundle` fails instead of testing a stale page.
//
// The digest is the SHA-256 of, for each input in byte order of its path from the
// repository root, the path, a newline, the lower-case hex SHA-256 of its content, a newline.
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const root = join(here, '..', '..');

function walk(dir, keep) {
  const out = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...walk(p, keep));
    else if (keep(name)) out.push(p);
  }
  return out;
}

const inputs = [
  ...walk(join(root, 'proto'), (n) => n.endsWith('.proto')),
  ...walk(join(here, 'src'), () => true),
  join(here, 'buf.gen.yaml'),
  join(here, 'package.json'),
  join(here, 'package-lock.json'),
]
  .map((p) => relative(root, p).split(sep).join('/'))
  .sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b)));

const h = createHash('sha256');
for (const p of inputs) {
  h.update(`${p}\n${createHash('sha256').update(readFileSync(join(root, p))).digest('hex')}\n`);
}
writeFileSync(join(here, 'dist', 'inputs.sha256'), h.digest('hex') + '\n');

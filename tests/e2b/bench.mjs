// SPDX-License-Identifier: Apache-2.0
// Times, through the unmodified E2B JS SDK against nsbox-http, what peers'
// leaderboards call time to interactive (Sandbox.create() to the first
// commands.run that succeeds) and a commands.run('true') round trip; prints
// the samples in ms as JSON for tests/bench/e2b.py.
//   node bench.mjs ROUNDS        env as suite.mjs's
//   node bench.mjs ROUNDS stub   commands.run('true') against a stub in this
//                                process that answers at once: the SDK's own cost
import http from "node:http";
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.E2B_SDK_DIR, "package.json"));
const { Sandbox } = require("e2b");

const rounds = Number(process.argv[2] || 50);
const now = () => Number(process.hrtime.bigint()) / 1e6;

// One Connect envelope: flags, big-endian length, JSON.
function envelope(flags, message) {
  const body = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(5);
  head[0] = flags;
  head.writeUInt32BE(body.length, 1);
  return Buffer.concat([head, body]);
}

// What nsbox-http answers for a sandbox and for a command that exits 0, sent at once.
function stub() {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      if (req.method === "DELETE") {
        res.writeHead(204);
        res.end();
      } else if (req.url.endsWith("/sandboxes")) {
        res.writeHead(201, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ sandboxID: "stub", templateID: "base", clientID: "stub", envdVersion: "0.6.1" }));
      } else {
        res.writeHead(200, { "Content-Type": "application/connect+json" });
        res.write(envelope(0, { event: { start: { pid: 1 } } }));
        res.end(Buffer.concat([
          envelope(0, { event: { end: { exitCode: 0, exited: true, status: "exit status 0" } } }),
          envelope(2, {}),
        ]));
      }
    });
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

async function runTrue(out) {
  const sbx = await Sandbox.create();
  for (let i = 0; i < rounds + 3; i++) {
    const t0 = now();
    await sbx.commands.run("true");
    if (i >= 3) out.push(now() - t0);
  }
  await sbx.kill();
}

if (process.argv[3] === "stub") {
  const server = await stub();
  const url = "http://127.0.0.1:" + server.address().port;
  process.env.E2B_API_URL = process.env.E2B_SANDBOX_URL = url;
  const out = { stub_run_true: [] };
  await runTrue(out.stub_run_true);
  server.close();
  console.log(JSON.stringify(out));
  process.exit(0);
}
const out = { create_to_first_command: [], run_true: [] };
for (let i = 0; i < rounds + 3; i++) {
  const t0 = now();
  const sbx = await Sandbox.create();
  await sbx.commands.run("true");
  const t1 = now();
  if (i >= 3) out.create_to_first_command.push(t1 - t0); // the first rounds warm the SDK and the pool
  await sbx.kill();
}
await runTrue(out.run_true);
console.log(JSON.stringify(out));

// SPDX-License-Identifier: Apache-2.0
// Times, through the unmodified E2B JS SDK against nsbox-http, what peers'
// leaderboards call time to interactive (Sandbox.create() to the first
// commands.run that succeeds) and a commands.run('true') round trip; prints
// the samples in ms as JSON for tests/bench/e2b.py.
//   node bench.mjs ROUNDS        env as suite.mjs's
import { createRequire } from "node:module";
import { join } from "node:path";

const require = createRequire(join(process.env.E2B_SDK_DIR, "package.json"));
const { Sandbox } = require("e2b");

const rounds = Number(process.argv[2] || 50);
const now = () => Number(process.hrtime.bigint()) / 1e6;
const out = { create_to_first_command: [], run_true: [] };
for (let i = 0; i < rounds + 3; i++) {
  const t0 = now();
  const sbx = await Sandbox.create();
  await sbx.commands.run("true");
  const t1 = now();
  if (i >= 3) out.create_to_first_command.push(t1 - t0); // the first rounds warm the SDK and the pool
  await sbx.kill();
}
const sbx = await Sandbox.create();
for (let i = 0; i < rounds + 3; i++) {
  const t0 = now();
  await sbx.commands.run("true");
  if (i >= 3) out.run_true.push(now() - t0);
}
await sbx.kill();
console.log(JSON.stringify(out));

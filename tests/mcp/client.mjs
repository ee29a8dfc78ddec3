// Drives `nsbox mcp` with the official MCP SDK client (Client +
// StdioClientTransport), as an agent host would, and prints one JSON report
// of what it saw for tests/integration/mcp/test_mcp.py to assert on.
//
//   node client.mjs SCENARIO
// env: MCP_SDK_DIR (holds node_modules/@modelcontextprotocol/sdk),
//      NSBOX_BIN (the nsbox binary), NSBOX_SOCKET (nsboxd's socket).
import { createRequire } from "node:module";
import { join } from "node:path";

// The SDK lives in a cache dir outside the tree, where ESM bare imports do not look.
const require = createRequire(join(process.env.MCP_SDK_DIR, "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { McpError } = require("@modelcontextprotocol/sdk/types.js");

const session = `${process.argv[2]}-${process.pid}`;

async function connect() {
  const transport = new StdioClientTransport({
    command: process.env.NSBOX_BIN,
    args: ["--socket", process.env.NSBOX_SOCKET, "mcp"],
    stderr: "pipe",
  });
  let stderr = "";
  transport.stderr.on("data", (d) => (stderr += d));
  let negotiated = null;
  const setVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (v) => {
    negotiated = v;
    setVersion?.(v);
  };
  const client = new Client({ name: "nsbox-test", version: "1.0.0" });
  await client.connect(transport);
  // How the server ended, once the SDK closes its stdin (its pid is public, its exit is not).
  const child = transport._process;
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  return { client, transport, stderr: () => stderr, negotiated: () => negotiated, exited };
}

function textJson(result) {
  const text = result.content.find((c) => c.type === "text");
  return JSON.parse(text.text);
}

function summary(result) {
  return {
    isError: result.isError ?? false,
    types: result.content.map((c) => c.type),
    json: textJson(result),
    hasStructuredContent: "structuredContent" in result,
  };
}

async function call(client, name, args, options) {
  return client.callTool({ name, arguments: args }, undefined, options);
}

const scenarios = {
  async initialize({ client, negotiated }) {
    return {
      serverVersion: client.getServerVersion(),
      capabilities: client.getServerCapabilities(),
      instructions: client.getInstructions(),
      protocolVersion: negotiated(),
      ping: await client.ping(),
    };
  },

  async list_tools({ client }) {
    const { tools } = await client.listTools();
    return { tools };
  },

  async sandbox_lifecycle({ client }) {
    const report = {};
    const created = await call(client, "create_sandbox", { memory_mb: 256, timeout: 600 });
    report.create = summary(created);
    const id = report.create.json.sandbox_id;
    report.python = summary(await call(client, "execute_python_code", { sandbox_id: id, code: "print(6 * 7)" }));
    report.traceback = summary(
      await call(client, "execute_python_code", { sandbox_id: id, code: "def f():\n    return 1 / 0\nf()\n" }),
    );
    report.listed = summary(await call(client, "list_sandboxes", {}));
    report.remove = summary(await call(client, "remove_sandbox", { sandbox_id: id }));
    report.listed_after = summary(await call(client, "list_sandboxes", {}));
    report.remove_again = summary(await call(client, "remove_sandbox", { sandbox_id: id }));
    report.sandbox_id = id;
    return report;
  },

  async session_state({ client }) {
    const r = {};
    r.write = summary(
      await call(client, "sandbox_fs_write", { session_id: session, path: "notes.txt", content: "from fs_write\n" }),
    );
    r.shell = summary(
      await call(client, "shell_execute", {
        session_id: session,
        command: "cat notes.txt && echo from shell >> notes.txt && pwd",
      }),
    );
    r.python = summary(
      await call(client, "python_execute", {
        session_id: session,
        code: "text = open('notes.txt').read()\nprint(text, end='')\nopen('/workspace/py.txt', 'w').write('from python\\n')\n",
      }),
    );
    r.list = summary(await call(client, "sandbox_fs_list", { session_id: session, path: "/workspace" }));
    r.read = summary(await call(client, "sandbox_fs_read", { session_id: session, path: "py.txt" }));
    r.shell_failure = summary(await call(client, "shell_execute", { session_id: session, command: "exit 3" }));
    // Every session tool went to one sandbox.
    const listed = textJson(await call(client, "list_sandboxes", {}));
    r.session_sandboxes = listed.sandboxes.filter((s) => s.session_id === session).map((s) => s.sandbox_id);
    for (const id of r.session_sandboxes) await call(client, "remove_sandbox", { sandbox_id: id, force: true });
    return r;
  },

  async plot({ client }) {
    const result = await call(client, "python_execute", {
      session_id: session,
      code:
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n" +
        "plt.plot([1, 2, 3], [1, 4, 9])\nplt.title('squares')\nplt.show()\nprint('plotted')\n",
      timeout: 120,
    });
    const images = result.content.filter((c) => c.type === "image");
    const r = summary(result);
    r.images = images.map((i) => ({
      mimeType: i.mimeType,
      bytes: Buffer.from(i.data, "base64").length,
      magic: Buffer.from(i.data, "base64").subarray(0, 8).toString("hex"),
    }));
    r.textLength = result.content[0].text.length;
    await cleanupSession(client);
    return r;
  },

  async unknown_tool({ client }) {
    try {
      await call(client, "no_such_tool", {});
      return { threw: false };
    } catch (e) {
      return { threw: true, isMcpError: e instanceof McpError, code: e.code, message: e.message, after: await client.ping() };
    }
  },

  async progress({ client }) {
    const shell = [];
    const started = Date.now();
    const result = await call(
      client,
      "shell_execute",
      { session_id: session, command: "for i in 1 2 3; do echo line$i; sleep 0.7; done" },
      { onprogress: (p) => shell.push({ ...p, at: Date.now() - started }) },
    );
    const python = [];
    const pyResult = await call(
      client,
      "python_execute",
      { session_id: session, code: "import time\ntime.sleep(2.6)\nprint('slept')\n" },
      { onprogress: (p) => python.push(p) },
    );
    await cleanupSession(client);
    return { shell, shellResult: summary(result), python, pythonResult: summary(pyResult) };
  },

  async cancel({ client }) {
    const r = {};
    // The sandbox first, so that the cancelled call is all exec.
    await call(client, "shell_execute", { session_id: session, command: "true" });
    const controller = new AbortController();
    const started = Date.now();
    const pending = call(
      client,
      "shell_execute",
      { session_id: session, command: "echo started > started.txt; sleep 300; echo finished > finished.txt" },
      { signal: controller.signal, timeout: 600000 },
    );
    // Cancel once it is surely running.
    for (let i = 0; i < 100; i++) {
      const seen = textJson(await call(client, "shell_execute", { session_id: session, command: "cat started.txt || true" }));
      if (seen.stdout.includes("started")) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.running_before = textJson(
      await call(client, "shell_execute", { session_id: session, command: "ps -eo args | grep -c '^sleep 300' || true" }),
    ).stdout.trim();
    controller.abort("test cancels");
    try {
      await pending;
      r.rejected = false;
    } catch (e) {
      r.rejected = true;
    }
    r.cancel_ms = Date.now() - started;
    // The server keeps serving, and the sleep is gone.
    let left = null;
    for (let i = 0; i < 50; i++) {
      left = textJson(
        await call(client, "shell_execute", { session_id: session, command: "ps -eo args | grep -c '^sleep 300' || true" }),
      ).stdout.trim();
      if (left === "0") break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.running_after = left;
    r.ping = await client.ping();
    await cleanupSession(client);
    return r;
  },

  // remove_sandbox (without force) at once after cancelling a long call, shell's and Python's.
  async cancel_remove({ client }) {
    const r = { attempts: [] };
    const calls = [
      ["shell_execute", { command: "touch /workspace/started; sleep 300" }],
      ["run_code", { code: "open('/workspace/started', 'w').close()\nimport time\ntime.sleep(300)", stateful: false }],
    ];
    for (const [tool, args] of calls) {
      const a = { tool };
      await call(client, "shell_execute", { session_id: session, command: "rm -f /workspace/started" });
      a.sandbox_id = textJson(await call(client, "list_sandboxes", {})).sandboxes.find(
        (s) => s.session_id === session,
      )?.sandbox_id;
      const controller = new AbortController();
      const pending = call(client, tool, { ...args, session_id: session }, { signal: controller.signal, timeout: 600000 });
      pending.catch(() => {});
      for (let i = 0; i < 200 && !a.started; i++) {
        const seen = textJson(
          await call(client, "shell_execute", { session_id: session, command: "test -e /workspace/started && echo yes || true" }),
        );
        a.started = seen.stdout.includes("yes");
        if (!a.started) await new Promise((res) => setTimeout(res, 100));
      }
      controller.abort("test cancels");
      a.remove = summary(await call(client, "remove_sandbox", { session_id: session }));
      try {
        await pending;
        a.rejected = false;
      } catch (e) {
        a.rejected = true;
      }
      r.attempts.push(a);
    }
    await cleanupSession(client);
    return r;
  },

  // The connection's default session: its sandbox id, then the SDK closes the client (test_mcp.py checks it goes).
  async default_session({ client }) {
    const r = {};
    r.run = summary(await call(client, "run_code", { code: "x = 1" }));
    r.listed = textJson(await call(client, "list_sandboxes", {})).sandboxes.map((s) => s.sandbox_id);
    return r;
  },

  // Against an nsboxd with the network policy "allowed" (tests/integration/mcp/test_mcp.py).
  async network({ client }) {
    const r = {};
    r.create = summary(await call(client, "create_sandbox", { network: "allowed" }));
    const id = r.create.json.sandbox_id;
    r.expose = summary(await call(client, "expose_port", { sandbox_id: id, port: 8000 }));
    r.expose_again = summary(await call(client, "expose_port", { sandbox_id: id, port: 8000 }));
    r.bad_port = summary(await call(client, "expose_port", { sandbox_id: id, port: 0 }));
    r.unknown = summary(await call(client, "create_sandbox", { network: "nope" }));
    await call(client, "remove_sandbox", { sandbox_id: id, force: true });
    // A session: created without network, then a call that asks for it, then one that does not say.
    r.shell_none = summary(await call(client, "shell_execute", { session_id: session, command: "ls /sys/class/net" }));
    r.shell_net = summary(
      await call(client, "shell_execute", { session_id: session, network: "allowed", command: "ls /sys/class/net" }),
    );
    r.shell_same = summary(await call(client, "shell_execute", { session_id: session, command: "ls /sys/class/net" }));
    const listed = textJson(await call(client, "list_sandboxes", {}));
    r.session_networks = listed.sandboxes.filter((s) => s.session_id === session).map((s) => s.network);
    r.no_network_expose = summary(
      await call(client, "expose_port", {
        sandbox_id: textJson(await call(client, "create_sandbox", { session_id: `${session}-plain` })).sandbox_id,
        port: 8000,
      }),
    );
    for (const s of listed.sandboxes.concat(textJson(await call(client, "list_sandboxes", {})).sandboxes))
      if (s.session_id?.startsWith(session)) await call(client, "remove_sandbox", { sandbox_id: s.sandbox_id, force: true });
    return r;
  },

  // Against an nsboxd with the network policy "allowed": a server that outlives the call that started it.
  async background_server({ client }) {
    const r = {};
    await call(client, "shell_execute", { session_id: session, command: "mkdir -p site && echo hello-from-sandbox > site/index.html" });
    r.start = summary(
      await call(client, "shell_start", {
        session_id: session,
        network: "allowed",
        command: "exec python3 -u -m http.server 8000 --bind 0.0.0.0",
        cwd: "site",
      }),
    );
    const job = r.start.json.job_id;
    // The log line says it listens (http.server prints it on stdout).
    let seen = null;
    for (let i = 0; i < 200; i++) {
      seen = summary(await call(client, "shell_output", { session_id: session, job_id: job }));
      if (seen.json.stdout.includes("Serving HTTP")) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.output = seen;
    r.expose = summary(await call(client, "expose_port", { sandbox_id: r.start.json.sandbox_id, port: 8000 }));
    // The host side fetches the URL now (test_mcp.py), then tells us to go on through stdin.
    process.stdout.write(JSON.stringify({ url: r.expose.json.url }) + "\n");
    await new Promise((res) => process.stdin.once("data", res));
    r.after_fetch = summary(
      await call(client, "shell_output", { session_id: session, job_id: job, since: r.output.json.next }),
    );
    r.other_session = summary(await call(client, "shell_output", { session_id: `${session}-other`, job_id: job }));
    r.kill = summary(await call(client, "shell_kill", { session_id: session, job_id: job }));
    r.after_kill = summary(await call(client, "shell_output", { session_id: session, job_id: job }));
    r.bad_signal = summary(await call(client, "shell_kill", { session_id: session, job_id: job, signal: "STOP" }));
    r.unknown_job = summary(await call(client, "shell_output", { session_id: session, job_id: "nope" }));
    r.failing = summary(await call(client, "shell_start", { session_id: session, command: "echo out; echo err >&2; exit 4" }));
    for (let i = 0; i < 100; i++) {
      r.failed = summary(await call(client, "shell_output", { session_id: session, job_id: r.failing.json.job_id }));
      if (!r.failed.json.running) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    // More than the cap: shown in parts, each part picks up where the last ended.
    const big = textJson(
      await call(client, "shell_start", { session_id: session, command: "head -c 40000 /dev/zero | tr '\\0' a" }),
    ).job_id;
    r.big = [];
    let since;
    for (let i = 0; i < 200 && r.big.length < 4; i++) {
      const part = summary(await call(client, "shell_output", { session_id: session, job_id: big, since }));
      if (part.json.running) {
        await new Promise((res) => setTimeout(res, 100));
        continue;
      }
      r.big.push({ length: part.json.stdout.length, next: part.json.next, more: part.json.more, note: part.json.note });
      since = part.json.next;
      if (!part.json.more) break;
    }
    for (const s of textJson(await call(client, "list_sandboxes", {})).sandboxes)
      if (s.session_id?.startsWith(session)) await call(client, "remove_sandbox", { sandbox_id: s.sandbox_id, force: true });
    return r;
  },

  // The consistent family (tests/integration/mcp/test_mcp_family.py): the connection's default session.
  async family({ client }) {
    const r = {};
    r.first = summary(await call(client, "run_code", { code: "x = 41\nimport math" }));
    r.second = summary(await call(client, "run_code", { code: "x += 1\nprint(x, math.pi > 3)" }));
    r.stateless = summary(await call(client, "run_code", { code: "print('x' in globals())", stateful: false }));
    const saved = await call(client, "run_code", {
      code:
        "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nfig = plt.figure()\n" +
        "plt.plot([1, 2, 3])\nfig.savefig('chart.png')\nplt.close(fig)\n" +
        "from PIL import Image\nImage.new('RGB', (20, 10), 'red').save('photo.jpg')\nprint('saved')\n",
      timeout: 120,
    });
    r.saved = summary(saved);
    r.saved.images = saved.content
      .filter((c) => c.type === "image")
      .map((i) => ({ mimeType: i.mimeType, magic: Buffer.from(i.data, "base64").subarray(0, 4).toString("hex") }));
    const once = await call(client, "python_execute", { code: "print('hello-once-' * 3)" });
    r.once = summary(once);
    r.once.raw = JSON.stringify(once);
    r.big_shell = summary(await call(client, "shell_execute", { command: "head -c 100000 /dev/zero | tr '\\0' a; echo END" }));
    r.big_python = summary(await call(client, "run_code", { code: "print('b' * 50000)\nprint('TAIL')", stateful: false }));
    const bytes = Buffer.from([...Array(256).keys()]);
    r.write_binary = summary(
      await call(client, "sandbox_fs_write", { path: "bin.dat", content: bytes.toString("base64"), encoding: "base64" }),
    );
    const read = summary(await call(client, "sandbox_fs_read", { path: "bin.dat", encoding: "base64" }));
    r.read_binary = { ...read, same: read.json.content === bytes.toString("base64") };
    const id = r.second.json.sandbox_id;
    r.by_id = summary(await call(client, "shell_execute", { sandbox_id: id, command: "wc -c < bin.dat" }));
    r.both = summary(await call(client, "shell_execute", { sandbox_id: id, session_id: "other", command: "true" }));
    // A persistent shell keeps cwd and variables.
    r.sh1 = summary(await call(client, "shell_session_run", { command: "cd /tmp && export FOO=bar" }));
    r.sh2 = summary(await call(client, "shell_session_run", { command: "pwd; echo $FOO" }));
    r.sh_fail = summary(await call(client, "shell_session_run", { command: "false" }));
    r.bg = summary(await call(client, "shell_session_run", { session_name: "bg", command: "sleep 1; echo later", blocking: false }));
    for (let i = 0; i < 200; i++) {
      r.bg_check = summary(await call(client, "shell_session_check", { session_name: "bg" }));
      if (!r.bg_check.json.running) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.sh_list = summary(await call(client, "shell_session_list", {}));
    r.sh_close = summary(await call(client, "shell_session_close", { session_name: "bg" }));
    r.sh_list_after = summary(await call(client, "shell_session_list", {}));
    r.sessions = textJson(await call(client, "list_sandboxes", {})).sandboxes.filter((s) => s.sandbox_id === id);
    r.remove = summary(await call(client, "remove_sandbox", { session_id: r.sessions[0]?.session_id ?? "none" }));
    r.remove_none = summary(await call(client, "remove_sandbox", {}));
    return r;
  },

  // notifications/cancelled on a blocking shell_session_run interrupts the command; the shell stays.
  async shell_session_cancel({ client }) {
    const r = {};
    await call(client, "shell_session_run", { session_id: session, command: "cd /tmp" });
    const controller = new AbortController();
    const pending = call(
      client,
      "shell_session_run",
      { session_id: session, command: "sleep 300", timeout: 600 },
      { signal: controller.signal, timeout: 600000 },
    );
    for (let i = 0; i < 100; i++) {
      const listed = textJson(await call(client, "shell_session_list", { session_id: session }));
      if (listed.sessions.some((s) => s.running)) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const started = Date.now();
    controller.abort("test cancels");
    try {
      await pending;
      r.rejected = false;
    } catch (e) {
      r.rejected = true;
    }
    for (let i = 0; i < 100; i++) {
      r.check = summary(await call(client, "shell_session_check", { session_id: session }));
      if (!r.check.json.running) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.stopped_ms = Date.now() - started;
    r.after = summary(await call(client, "shell_session_run", { session_id: session, command: "pwd" }));
    await cleanupSession(client);
    return r;
  },

  // Against an nsboxd whose sandboxes are reaped quickly (tests/integration/mcp/test_mcp_family.py).
  async reaped({ client }) {
    const r = {};
    r.create = summary(await call(client, "create_sandbox", { session_id: session, timeout: 1 }));
    r.first = summary(await call(client, "run_code", { session_id: session, code: "x = 1" }));
    for (let i = 0; i < 600; i++) {
      const listed = textJson(await call(client, "list_sandboxes", {})).sandboxes;
      r.gone = !listed.some((s) => s.sandbox_id === r.create.json.sandbox_id);
      if (r.gone) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    r.again = summary(await call(client, "run_code", { session_id: session, code: "print('x' in globals())" }));
    await cleanupSession(client);
    return r;
  },

  async oom({ client }) {
    const r = {};
    r.create = summary(await call(client, "create_sandbox", { session_id: session, memory_mb: 64 }));
    r.oom = summary(
      await call(client, "run_code", {
        session_id: session,
        stateful: false,
        code: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
        timeout: 60,
      }),
    );
    // Stateful (run_code's default): the interpreter itself is killed.
    r.stateful = summary(
      await call(client, "run_code", {
        session_id: session,
        code: "chunks = []\nwhile True:\n    chunks.append(bytearray(16 << 20))\n",
        timeout: 60,
      }),
    );
    await cleanupSession(client);
    return r;
  },

  async concurrency({ client }) {
    await call(client, "shell_execute", { session_id: session, command: "true" });
    const started = Date.now();
    const slow = [1, 2].map(() => call(client, "shell_execute", { session_id: session, command: "sleep 3; echo done" }));
    const pingStart = Date.now();
    await client.ping();
    const ping_ms = Date.now() - pingStart;
    const results = await Promise.all(slow);
    const total_ms = Date.now() - started;
    await cleanupSession(client);
    return { ping_ms, total_ms, outputs: results.map((r) => textJson(r).stdout) };
  },
};

async function cleanupSession(client) {
  const listed = textJson(await call(client, "list_sandboxes", {}));
  for (const s of listed.sandboxes.filter((s) => s.session_id === session))
    await call(client, "remove_sandbox", { sandbox_id: s.sandbox_id, force: true });
}

const name = process.argv[2];
if (!scenarios[name]) {
  console.error(`unknown scenario ${name}; one of: ${Object.keys(scenarios).join(" ")}`);
  process.exit(2);
}
const conn = await connect();
let report;
try {
  report = await scenarios[name](conn);
} catch (e) {
  report = { exception: String(e?.stack ?? e) };
}
await conn.client.close();
report.server_exit = await conn.exited;
report.server_stderr = conn.stderr();
process.stdout.write(JSON.stringify(report) + "\n");

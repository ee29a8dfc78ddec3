// SPDX-License-Identifier: Apache-2.0
// Drives nsbox-http's E2B API with the unmodified E2B SDKs (e2b,
// @e2b/code-interpreter and @e2b/desktop from npm, pinned in package.json), as a program
// written for E2B would, and prints one JSON report of what it saw for
// tests/integration/e2b/test_e2b_sdk.py to assert on.
//
//   node suite.mjs SCENARIO
// env: E2B_SDK_DIR (holds node_modules), E2B_API_URL, E2B_SANDBOX_URL,
//      E2B_VOLUME_API_URL, E2B_API_KEY (the four a user changes), E2B_OTHER_KEY
//      (another owner's); the ports scenarios: NODE_EXTRA_CA_CERTS (the test's
//      CA of nsbox-http's wildcard certificate), E2B_TEST_CONNECT (the HOST:PORT
//      nsbox-http is at, whatever name a URL has: *.localhost resolves to
//      loopback in browsers).
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { createRequire } from "node:module";
import { join } from "node:path";
import { inflateSync } from "node:zlib";

// The SDKs live in a cache dir outside the tree, where ESM bare imports do not look.
const require = createRequire(join(process.env.E2B_SDK_DIR, "package.json"));
const e2b = require("e2b");
const ci = require("@e2b/code-interpreter");
const desktop = require("@e2b/desktop");
const { Sandbox, CommandExitError, NotFoundError } = e2b;

const report = {};
const errorName = (e) => (e && e.constructor ? e.constructor.name : String(e));
const until = async (what, fn, ms = 20000) => {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

// The [r, g, b] at x, y of an 8-bit RGB or RGBA PNG (what scrot writes), not interlaced.
const pixelAt = (png, x, y) => {
  let pos = 8, width = 0, bpp = 3;
  const idat = [];
  while (pos < png.length) {
    const len = png.readUInt32BE(pos), kind = png.toString("latin1", pos + 4, pos + 8);
    const body = png.subarray(pos + 8, pos + 8 + len);
    if (kind === "IHDR") { width = body.readUInt32BE(0); bpp = body[9] === 6 ? 4 : 3; }
    if (kind === "IDAT") idat.push(body);
    pos += 12 + len;
  }
  const raw = inflateSync(Buffer.concat(idat)), stride = width * bpp;
  let prev = Buffer.alloc(stride), line;
  for (let row = 0; row <= y; row++) {
    const f = raw[row * (stride + 1)];
    line = Buffer.from(raw.subarray(row * (stride + 1) + 1, (row + 1) * (stride + 1)));
    for (let i = 0; i < stride; i++) {
      const a = i >= bpp ? line[i - bpp] : 0, b = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      const p = a + b - c, pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
      const add = [0, a, b, (a + b) >> 1, pa <= pb && pa <= pc ? a : pb <= pc ? b : c][f];
      line[i] = (line[i] + add) & 0xff;
    }
    prev = line;
  }
  return [...line.subarray(x * bpp, x * bpp + 3)];
};
const near = (got, want) => got.every((v, i) => Math.abs(v - want[i]) <= 40);

// An https URL's request as a browser would send it (its name in SNI and Host), sent to
// E2B_TEST_CONNECT. upgrade: a WebSocket's opening handshake; the answer is then the first
// bytes the server sends over it. Resolves {status, body} or, upgraded, {status: 101, data}.
const fetchAt = (url, headers = {}, upgrade = false) => new Promise((resolve, reject) => {
  const u = new URL(url);
  const [host, port] = process.env.E2B_TEST_CONNECT.split(":");
  const h = { Host: u.host, ...headers };
  if (upgrade) Object.assign(h, { Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Version": "13",
                                  "Sec-WebSocket-Key": Buffer.from("nsbox-test-key16").toString("base64") });
  const req = httpsRequest({ host, port: Number(port), servername: isIP(u.hostname) ? "" : u.hostname,
                             path: u.pathname + u.search,
                             headers: h, timeout: 20000, agent: false });
  req.on("timeout", () => req.destroy(new Error(`no answer from ${url}`)));
  req.on("error", (e) => reject(new Error(`${upgrade ? "WebSocket " : ""}${url}: ${e.message}`)));
  req.on("upgrade", (res, socket, head) => {
    let data = head;
    const done = () => { socket.destroy(); resolve({ status: res.statusCode, data: data.toString("latin1") }); };
    const greeted = () => /RFB 003\.00\d/.test(data.toString("latin1"));
    if (greeted()) return done();
    socket.on("data", (more) => { data = Buffer.concat([data, more]); if (greeted()) done(); });
    socket.on("end", done);
    socket.setTimeout(20000, done);
  });
  req.on("response", (res) => {
    const parts = [];
    res.on("data", (c) => parts.push(c));
    res.on("end", () => resolve({ status: res.statusCode, body: Buffer.concat(parts).toString() }));
  });
  req.end();
});

const scenarios = {
  async lifecycle() {
    const sbx = await Sandbox.create({ envs: { GREETING: "hi" }, metadata: { suite: "e2b", run: String(process.pid) }, timeoutMs: 120000 });
    report.sandboxId = sbx.sandboxId;
    report.isRunning = await sbx.isRunning();
    const info = await sbx.getInfo();
    report.info = { state: info.state, metadata: info.metadata, sandboxId: info.sandboxId };
    const other = await Sandbox.create({ metadata: { suite: "other" } });
    const listed = await Sandbox.list({ query: { metadata: { run: String(process.pid) } } }).nextItems();
    report.listed = listed.map((s) => s.sandboxId);
    const env = await sbx.commands.run("echo $GREETING");
    report.env = env.stdout;
    await sbx.setTimeout(300000);
    report.timeoutSet = true;
    const again = await Sandbox.connect(sbx.sandboxId);
    report.connected = (await again.commands.run("echo again")).stdout;
    await other.kill();
    await sbx.kill();
    report.isRunningAfterKill = await sbx.isRunning();
    try {
      await Sandbox.getInfo(sbx.sandboxId);
      report.infoAfterKill = "found";
    } catch (e) {
      report.infoAfterKill = errorName(e);
    }
  },

  async commands() {
    const sbx = await Sandbox.create();
    try {
      const fg = await sbx.commands.run("echo out; echo err >&2; exit 0");
      report.fg = { stdout: fg.stdout, stderr: fg.stderr, exitCode: fg.exitCode };
      const seen = { out: "", err: "" };
      await sbx.commands.run("echo a; echo b >&2", { onStdout: (d) => (seen.out += d), onStderr: (d) => (seen.err += d) });
      report.callbacks = seen;
      try {
        await sbx.commands.run("echo failing >&2; exit 3");
        report.exit = "no error";
      } catch (e) {
        report.exit = { name: errorName(e), isCommandExitError: e instanceof CommandExitError, exitCode: e.exitCode, stderr: e.stderr };
      }
      const bg = await sbx.commands.run("sleep 0.2; echo done-bg", { background: true });
      const waited = await bg.wait();
      report.bg = { stdout: waited.stdout, exitCode: waited.exitCode, pid: typeof bg.pid };
      const cat = await sbx.commands.run("cat", { background: true, stdin: true });
      await sbx.commands.sendStdin(cat.pid, "from stdin\n");
      await sbx.commands.closeStdin(cat.pid);
      report.stdin = (await cat.wait()).stdout;
      const sleeper = await sbx.commands.run("sleep 600", { background: true });
      const listed = await sbx.commands.list();
      report.listedSleeper = listed.some((p) => p.pid === sleeper.pid);
      report.killed = await sleeper.kill();
      try {
        await sleeper.wait();
        report.killedWait = "no error";
      } catch (e) {
        report.killedWait = { name: errorName(e), exitCode: e.exitCode };
      }
      const long = await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.05; done", { background: true });
      const reconnected = await sbx.commands.connect(long.pid);
      report.connectWait = (await reconnected.wait()).exitCode;
    } finally {
      await sbx.kill();
    }
  },

  async files() {
    const sbx = await Sandbox.create();
    try {
      await sbx.files.write("/workspace/dir/hello.txt", "hello e2b\n");
      report.text = await sbx.files.read("/workspace/dir/hello.txt");
      const bytes = new Uint8Array([0, 1, 2, 250, 255]);
      await sbx.files.write("/workspace/bin.dat", bytes.buffer);
      report.bytes = Array.from(await sbx.files.read("/workspace/bin.dat", { format: "bytes" }));
      report.exists = await sbx.files.exists("/workspace/dir/hello.txt");
      report.missing = await sbx.files.exists("/workspace/nope");
      report.madeDir = await sbx.files.makeDir("/workspace/made/sub");
      report.madeAgain = await sbx.files.makeDir("/workspace/made/sub");
      const info = await sbx.files.getInfo("/workspace/dir/hello.txt");
      report.info = { name: info.name, type: info.type, size: info.size, path: info.path };
      const entries = await sbx.files.list("/workspace");
      report.list = entries.map((e) => `${e.name}:${e.type}`).sort();
      const deep = await sbx.files.list("/workspace", { depth: 3 });
      report.deep = deep.map((e) => e.path).sort();
      const moved = await sbx.files.rename("/workspace/dir/hello.txt", "/workspace/dir/moved.txt");
      report.moved = moved.path;
      report.movedText = await sbx.files.read("/workspace/dir/moved.txt");
      await sbx.files.remove("/workspace/dir");
      report.removed = !(await sbx.files.exists("/workspace/dir"));
      try {
        await sbx.files.read("/workspace/nope");
        report.readMissing = "no error";
      } catch (e) {
        report.readMissing = errorName(e);
      }
    } finally {
      await sbx.kill();
    }
  },

  async watch() {
    const sbx = await Sandbox.create();
    try {
      await sbx.files.makeDir("/workspace/watched/sub");
      const events = [];
      const handle = await sbx.files.watchDir("/workspace/watched", (e) => events.push(`${e.type}:${e.name}`), { recursive: true });
      await sbx.files.write("/workspace/watched/a.txt", "a");
      await sbx.files.write("/workspace/watched/sub/b.txt", "b");
      await sbx.commands.run("rm /workspace/watched/a.txt");
      await until("the remove event", () => events.includes("remove:a.txt"));
      await until("the event in sub", () => events.some((e) => e.endsWith(":sub/b.txt")));
      await handle.stop();
      report.events = events;
      // the watch ended with its stream: the sandbox serves on
      report.after = (await sbx.commands.run("echo still")).stdout;
    } finally {
      await sbx.kill();
    }
  },

  async interpreter() {
    const sbx = await ci.Sandbox.create();
    try {
      await sbx.runCode("x = 41");
      const sum = await sbx.runCode("x + 1");
      report.text = sum.text;
      const printed = await sbx.runCode("print('hi')");
      report.stdout = printed.logs.stdout;
      const chart = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()");
      report.png = chart.results.some((r) => r.png && Buffer.from(r.png, "base64").subarray(1, 4).toString() === "PNG");
      const failed = await sbx.runCode("import sys\nprint('before', file=sys.stderr)\n1 / 0");
      report.error = failed.error ? { name: failed.error.name, value: failed.error.value, traceback: failed.error.traceback.includes("ZeroDivisionError") } : null;
      report.stderrBeforeError = failed.logs.stderr;
      const ctx = await sbx.createCodeContext();
      await sbx.runCode("y = 5", { context: ctx });
      report.inContext = (await sbx.runCode("y * 2", { context: ctx })).text;
      report.defaultHasY = (await sbx.runCode("'y' in globals()")).text;
      report.contextHasX = (await sbx.runCode("'x' in globals()", { context: ctx })).text;
      report.listed = (await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
      await sbx.restartCodeContext(ctx);
      report.afterRestart = (await sbx.runCode("'y' in globals()", { context: ctx })).text;
      await sbx.removeCodeContext(ctx);
      report.listedAfterRemove = (await sbx.listCodeContexts()).map((c) => c.id).includes(ctx.id);
      // A context of its own cwd; env vars for one cell.
      const tmpCtx = await sbx.createCodeContext({ cwd: "/tmp" });
      report.contextCwd = (await sbx.runCode("import os\nos.getcwd()", { context: tmpCtx })).text;
      report.defaultCwd = (await sbx.runCode("import os\nos.getcwd()")).text;
      report.envs = (await sbx.runCode("import os\nos.environ.get('CELL_VAR')", { envs: { CELL_VAR: "v" } })).text;
      report.envsAfter = (await sbx.runCode("os.environ.get('CELL_VAR', 'unset')")).text;
    } finally {
      await sbx.kill();
    }
  },

  // onStdout/onStderr hear a cell's lines while it runs: the cell waits for a
  // file that the callback writes once it has heard the first line.
  async interpreterLive() {
    const sbx = await ci.Sandbox.create();
    try {
      const heard = [];
      const code = "import os, sys, time\nprint('first')\nprint('err-first', file=sys.stderr)\n" +
        "for _ in range(600):\n    if os.path.exists('/workspace/go'):\n        break\n    time.sleep(0.05)\n" +
        "print('saw-go' if os.path.exists('/workspace/go') else 'no-go')";
      const run = await sbx.runCode(code, {
        onStdout: async (m) => {
          heard.push(["out", m.line]);
          if (m.line === "first\n") await sbx.files.write("/workspace/go", "x");
        },
        onStderr: (m) => heard.push(["err", m.line]),
      });
      report.heard = heard;
      report.stdout = run.logs.stdout;
      // onResult hears a figure shown mid-cell while the cell still runs
      const figure = "import os, time\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n" +
        "for _ in range(600):\n    if os.path.exists('/workspace/go-figure'):\n        break\n    time.sleep(0.05)\n" +
        "print('saw-go' if os.path.exists('/workspace/go-figure') else 'no-go')";
      const shown = await sbx.runCode(figure, {
        onResult: async (r) => {
          if (r.png) await sbx.files.write("/workspace/go-figure", "x");
        },
      });
      report.figureStdout = shown.logs.stdout;
      report.figurePngs = shown.results.filter((r) => r.png).length;
    } finally {
      await sbx.kill();
    }
  },

  async pty() {
    const sbx = await Sandbox.create();
    try {
      let seen = "";
      const decoder = new TextDecoder();
      const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => (seen += decoder.decode(d)) });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("echo pty-$((6*7))\n"));
      await until("the pty's output", () => seen.includes("pty-42"));
      await sbx.pty.resize(term.pid, { cols: 100, rows: 30 });
      await sbx.pty.sendInput(term.pid, new TextEncoder().encode("stty size\n"));
      await until("the new size", () => seen.includes("30 100"));
      report.ptyKilled = await term.kill();
      report.seen = { answer: seen.includes("pty-42"), size: seen.includes("30 100") };
    } finally {
      await sbx.kill();
    }
  },

  async pause() {
    const sbx = await Sandbox.create();
    try {
      await sbx.files.write("/workspace/kept.txt", "kept");
      report.paused = await sbx.pause();
      report.pausedAgain = await Sandbox.pause(sbx.sandboxId);
      report.stateWhilePaused = (await sbx.getInfo()).state;
      const again = await Sandbox.connect(sbx.sandboxId);
      report.stateAfterConnect = (await again.getInfo()).state;
      report.kept = await again.files.read("/workspace/kept.txt");
      const metrics = await again.getMetrics();
      report.metrics = metrics.length > 0 ? { memTotal: metrics[0].memTotal > 0, memUsed: metrics[0].memUsed > 0, cpuCount: metrics[0].cpuCount, date: metrics[0].timestamp instanceof Date } : null;
    } finally {
      await sbx.kill();
    }
  },

  async snapshots() {
    const sbx = await Sandbox.create();
    const made = [];
    try {
      await sbx.files.write("/workspace/state.txt", "before the snapshot");
      const snap = await sbx.createSnapshot({ name: `snap-${process.pid}` });
      report.names = snap.names;
      const listed = await Sandbox.listSnapshots({ sandboxId: sbx.sandboxId }).nextItems();
      report.listed = listed.some((s) => s.snapshotId === snap.snapshotId);
      const fromSnap = await Sandbox.create(snap.snapshotId);
      made.push(fromSnap);
      report.fromSnapshot = await fromSnap.files.read("/workspace/state.txt");
      const forks = await sbx.fork({ count: 2 });
      made.push(...forks.filter((f) => !(f instanceof Error)));
      report.forks = await Promise.all(forks.map(async (f) => (f instanceof Error ? `error: ${f.message}` : await f.files.read("/workspace/state.txt"))));
      report.forkIds = new Set(forks.map((f) => f.sandboxId)).size;
      for (const m of made) await m.kill();
      made.length = 0;
      report.deleted = await Sandbox.deleteSnapshot(snap.snapshotId);
      report.deletedAgain = await Sandbox.deleteSnapshot(snap.snapshotId);
    } finally {
      for (const m of made) await m.kill().catch(() => {});
      await sbx.kill();
    }
  },

  async volumes() {
    const { Volume } = e2b;
    const other = { apiKey: process.env.E2B_OTHER_KEY };
    const vol = await Volume.create(`e2b-vol-${process.pid}`);
    report.created = { volumeId: vol.volumeId, name: vol.name };
    report.listed = (await Volume.list()).some((v) => v.volumeId === vol.volumeId);
    report.info = (await Volume.getInfo(vol.volumeId)).name;
    try {
      await Volume.getInfo(vol.volumeId, other);
      report.otherInfo = "found";
    } catch (e) {
      report.otherInfo = errorName(e);
    }
    report.otherListed = (await Volume.list(other)).some((v) => v.volumeId === vol.volumeId);
    const a = await Sandbox.create({ volumeMounts: { "/data": vol } });
    try {
      await a.commands.run("echo kept > /data/note");
      report.mounts = (await Sandbox.getInfo(a.sandboxId)).volumeMounts;
      report.readByFiles = await a.files.read("/data/note");
      await a.files.write("/data/by-files.txt", "written by files.write\n");
      report.owner = (await a.commands.run("stat -c %U /data/by-files.txt")).stdout;
    } finally {
      await a.kill();
    }
    const b = await Sandbox.create({ volumeMounts: { "/workspace/v": vol.name } });
    try {
      report.second = (await b.commands.run("cat /workspace/v/note /workspace/v/by-files.txt")).stdout;
      try {
        await Volume.destroy(vol.volumeId);
        report.destroyWhileMounted = "destroyed";
      } catch (e) {
        report.destroyWhileMounted = errorName(e);
      }
    } finally {
      await b.kill();
    }
    report.destroyed = await Volume.destroy(vol.volumeId);
    report.destroyedAgain = await Volume.destroy(vol.volumeId);
    try {
      await Volume.getInfo(vol.volumeId);
      report.infoAfterDestroy = "found";
    } catch (e) {
      report.infoAfterDestroy = errorName(e);
    }
  },

  // A volume's files without a sandbox: Volume's content methods on E2B_VOLUME_API_URL.
  async volumeContent() {
    const { Volume } = e2b;
    const other = { apiKey: process.env.E2B_OTHER_KEY };
    const stat = (e) => ({ name: e.name, type: e.type, path: e.path, size: e.size, mode: e.mode, uid: e.uid, gid: e.gid,
                           datesValid: [e.atime, e.mtime, e.ctime].every((d) => d instanceof Date && !isNaN(d)) });
    const caught = async (fn) => {
      try {
        await fn();
        return "no error";
      } catch (e) {
        return errorName(e);
      }
    };
    const name = `e2b-vc-${process.pid}`;
    const vol = await Volume.create(name);
    let theirs = null;
    try {
      report.hasToken = typeof vol.token === "string" && vol.token.length > 0;
      report.written = stat(await vol.writeFile("/notes/from-sdk.txt", "written by Volume.writeFile\n"));
      report.madeDir = stat(await vol.makeDir("/made/deep", { force: true }));
      report.madeAgain = await caught(() => vol.makeDir("/made/deep"));
      await vol.writeFile("/bin.dat", new Uint8Array([0, 1, 2, 250, 255]).buffer);
      report.bytes = Array.from(await vol.readFile("/bin.dat", { format: "bytes" }));
      const sbx = await Sandbox.create({ volumeMounts: { "/data": vol } });
      try {
        report.inSandbox = (await sbx.commands.run("cat /data/notes/from-sdk.txt; stat -c '%U %a' /data/notes/from-sdk.txt /data/made/deep")).stdout;
        await sbx.commands.run("echo written in the sandbox > /data/notes/from-sandbox.txt");
        report.readWhileMounted = await vol.readFile("/notes/from-sandbox.txt");
      } finally {
        await sbx.kill();
      }
      report.readAfter = await vol.readFile("notes/from-sandbox.txt");
      report.listed = (await vol.list("/notes")).map(stat);
      report.listedDeep = (await vol.list("/", { depth: 2 })).map((e) => e.path).sort();
      report.info = stat(await vol.getInfo("/notes"));
      report.exists = await vol.exists("/notes/from-sdk.txt");
      report.missing = await vol.exists("/notes/nope.txt");
      report.updatedMode = (await vol.updateMetadata("/notes/from-sdk.txt", { mode: 0o600 })).mode;
      report.chown = await caught(() => vol.updateMetadata("/notes/from-sdk.txt", { uid: 0 }));
      report.readMissing = await caught(() => vol.readFile("/notes/nope.txt"));
      report.readAbove = await caught(() => vol.readFile("/../../../etc/hostname"));
      report.forgedToken = await caught(() => new Volume(vol.volumeId, vol.name, "0".repeat(64)).readFile("/bin.dat"));
      // Another key's volume of the same name is its own: its token never reaches this one's files.
      theirs = await Volume.create(name, other);
      report.theirsSees = await theirs.exists("/notes/from-sdk.txt");
      report.theirsTokenDiffers = theirs.token !== vol.token;
      await vol.remove("/notes");
      report.existsAfterRemove = await vol.exists("/notes");
      report.removeMissing = await caught(() => vol.remove("/notes"));
      const connected = await Volume.connect(vol.volumeId);
      report.connectedRead = Array.from(await connected.readFile("/bin.dat", { format: "bytes" }));
    } finally {
      if (theirs) await Volume.destroy(theirs.volumeId, other);
      await Volume.destroy(vol.volumeId);
    }
  },

  async isolation() {
    const mine = await Sandbox.create({ metadata: { owner: "a" } });
    try {
      const other = { apiKey: process.env.E2B_OTHER_KEY };
      const theirs = await Sandbox.list({ ...other }).nextItems();
      report.otherSees = theirs.map((s) => s.sandboxId).includes(mine.sandboxId);
      try {
        await Sandbox.connect(mine.sandboxId, other);
        report.otherConnect = "connected";
      } catch (e) {
        report.otherConnect = errorName(e);
      }
      try {
        await Sandbox.kill(mine.sandboxId, other);
        report.otherKill = "no error";
      } catch (e) {
        report.otherKill = errorName(e);
      }
      report.stillRunning = await mine.isRunning();
    } finally {
      await mine.kill();
    }
  },

  // @e2b/desktop on the desktop image: its own Xvfb and "XFCE" (openbox), a Tk
  // window the scenario opens, screenshots (base64 PNGs for the test to read
  // pixels of), the mouse and the keyboard, the screen's size and an application
  // launched by its .desktop entry.
  async desktop() {
    const sbx = await desktop.Sandbox.create({ resolution: [800, 600], timeoutMs: 120000 });
    // A command that exited non-zero (xdotool search finding nothing) is "not yet".
    const notYet = (e) => {
      if (e instanceof CommandExitError) return null;
      throw e;
    };
    // Waits as `until` does; a wait that times out says what the sandbox runs, which windows
    // the X server has and whether a window manager manages them, and what `logs` hold.
    const waitFor = async (what, fn, ms, logs = "") => {
      try {
        return await until(what, fn, ms);
      } catch (e) {
        const seen = await sbx.commands.run(`for f in ${logs}; do echo "== $f"; cat $f; done; ` +
          "ps -eo pid,stat,etime,wchan:24,args; xprop -root _NET_SUPPORTING_WM_CHECK; xwininfo -root -tree",
          { timeoutMs: 20000 }).then((r) => r.stdout, (f) => `${f}\n${f.stdout || ""}`);
        throw new Error(`${e.message}; in the sandbox:\n${seen}`);
      }
    };
    try {
      report.sandboxId = sbx.sandboxId;
      report.display = (await sbx.commands.run("echo $DISPLAY")).stdout;
      // Sandbox.create waits for processes named xfwm4 (openbox), not for openbox to manage
      // the screen: a window mapped before it does is drawn where it asked to be, then moved
      // into openbox's frame. openbox sets the root's _NET_SUPPORTING_WM_CHECK once it manages.
      await waitFor("the window manager", async () =>
        (await sbx.commands.run("xprop -root _NET_SUPPORTING_WM_CHECK").catch(notYet))?.stdout.includes("window id"),
        60000);
      // A window: an entry that sets the window's colour (Enter), a pad that turns red when clicked.
      await sbx.files.write("/tmp/app.py", [
        "import faulthandler, time, tkinter as tk",
        // a window that never shows: where the app is, in its log, before the wait gives up
        "faulthandler.dump_traceback_later(45)",
        // the display may still be starting under load: try it for 30 s, as a user's app would wait
        "for i in range(300):",
        "    try: r = tk.Tk(); break",
        "    except tk.TclError: time.sleep(0.1)",
        "r.title('e2bdesk'); r.geometry('300x200+100+100'); r.configure(bg='#0000ff')",
        "e = tk.Entry(r); e.place(x=10, y=10, width=200)",
        "e.bind('<Return>', lambda ev: r.configure(bg=e.get()))",
        "pad = tk.Frame(r, bg='#ffffff'); pad.place(x=10, y=100, width=280, height=90)",
        "pad.bind('<Button-1>', lambda ev: pad.configure(bg='#ff0000'))",
        // where the window's inside is on the screen once it is shown, and again whenever the
        // window manager moves it (its frame's title bar moves the inside down)
        "def placed(ev):",
        "    if ev.widget is r and r.winfo_viewable():",
        "        faulthandler.cancel_dump_traceback_later()",
        "        open('/tmp/app.pos', 'w').write('%d %d' % (r.winfo_rootx(), r.winfo_rooty()))",
        "r.bind('<Map>', placed); r.bind('<Configure>', placed)",
        "r.mainloop()",
      ].join("\n"));
      await (await sbx.commands.run("python3 /tmp/app.py > /tmp/app.log 2>&1",
                                    { background: true, timeoutMs: 0 })).disconnect();
      // The window is there when the screen shows its blue where the app last said it is:
      // the position is read again on every try (one read: an absent file is "not yet").
      let wx, wy;
      report.before = await waitFor("the window", async () => {
        const pos = await sbx.files.read("/tmp/app.pos").catch((e) => {
          if (e instanceof NotFoundError) return "";
          throw e;
        });
        if (!/^\d+ \d+$/.test(pos)) return null;
        [wx, wy] = pos.split(" ").map(Number);
        if (wx + 300 > 800 || wy + 200 > 600) return null;
        const png = Buffer.from(await sbx.screenshot());
        return near(pixelAt(png, wx + 250, wy + 60), [0, 0, 255]) && png.toString("base64");
      }, 60000, "/tmp/app.log /tmp/app.pos");
      report.window = { x: wx, y: wy };
      // Polls screenshots until the pixel at x, y has the colour (Tk draws when it is idle);
      // the last screenshot, base64, for the test to read again.
      const shotUntil = async (what, x, y, colour) => {
        let png;
        await until(what, async () => near(pixelAt((png = Buffer.from(await sbx.screenshot())), x, y), colour));
        return png.toString("base64");
      };
      await sbx.moveMouse(wx + 5, wy + 150);
      report.cursor = await sbx.getCursorPosition();
      await sbx.leftClick(wx + 150, wy + 150);
      report.clicked = await shotUntil("the red pad", wx + 250, wy + 170, [255, 0, 0]);
      await sbx.leftClick(wx + 100, wy + 20);
      await sbx.write("#00ff00");
      await sbx.press("enter");
      report.typed = await shotUntil("the green window", wx + 250, wy + 60, [0, 255, 0]);
      report.windowIds = await sbx.getApplicationWindows("Tk");
      // xrandr's answer, and xterm started by its .desktop entry (gtk-launch), found by its class.
      report.screenSize = await sbx.getScreenSize();
      await sbx.launch("xterm");
      const launched = await waitFor("the launched xterm's window",
        () => sbx.getApplicationWindows("xterm").catch(notYet), 60000);
      report.launchedWindows = launched;
      report.launchedTitle = await sbx.getWindowTitle(launched[0]);
      const geometry = Object.fromEntries((await sbx.commands.run(`xdotool getwindowgeometry --shell ${launched[0]}`))
        .stdout.trim().split("\n").map((line) => line.split("=")).map(([k, v]) => [k, Number(v)]));
      report.launchedGeometry = geometry;
      // xterm's background is white: its middle, away from the prompt's text (the window is
      // larger than the space openbox finds for it, and goes past the screen's bottom)
      report.launched = await shotUntil("the xterm drawn", geometry.X + (geometry.WIDTH >> 1),
                                        geometry.Y + (geometry.HEIGHT >> 1), [255, 255, 255]);
      // The stream runs in the sandbox; its URL names E2B's domain (this front has none).
      await sbx.stream.start();
      report.streamUrl = sbx.stream.getUrl();
      report.novncPage = (await sbx.commands.run("curl -s http://127.0.0.1:6080/vnc.html")).stdout.includes("noVNC");
      await sbx.stream.stop();
      // The launched application runs on (nsbox ends what a command leaves behind: the image's
      // gtk-launch waits for what it started).
      report.launchedAtEnd = await sbx.getApplicationWindows("xterm").catch(notYet);
    } finally {
      await sbx.kill();
    }
    report.isRunningAfterKill = await sbx.isRunning();
  },

  // sandbox.getHost(port): a server started in the sandbox, reached at https://PORT-ID.DOMAIN
  // (DOMAIN: what nsbox-http answered as the sandbox's domain) with the sandbox's traffic token.
  async getHost() {
    const sbx = await Sandbox.create({ network: { denyOut: ["0.0.0.0/0"] }, timeoutMs: 120000 });
    try {
      report.sandboxId = sbx.sandboxId;
      await sbx.files.write("/tmp/www/hello.txt", "hello through getHost\n");
      await sbx.commands.run("cd /tmp/www && exec python3 -m http.server 8000", { background: true, timeoutMs: 0 });
      report.host = sbx.getHost(8000);
      report.hostAfterConnect = (await Sandbox.connect(sbx.sandboxId)).getHost(8000);  // connect's domain too
      const token = { "E2B-Traffic-Access-Token": sbx.trafficAccessToken };
      report.hello = await until("the server in the sandbox", async () => {
        const r = await fetchAt(`https://${report.host}/hello.txt`, token);
        return r.status === 200 && r.body;
      }, 30000);
      // E2B's headers name the sandbox's port too, at E2B_SANDBOX_URL (what the SDKs send to it)
      report.byHeaders = (await fetchAt(`${process.env.E2B_SANDBOX_URL}/hello.txt`, {
        "E2b-Sandbox-Id": sbx.sandboxId, "E2b-Sandbox-Port": "8000", "X-Access-Token": sbx.envdAccessToken })).body;
      report.listing = (await fetchAt(`https://${report.host}/?a=b%20c`, token)).status;
      report.missing = (await fetchAt(`https://${report.host}/none.txt`, token)).status;
      report.withoutToken = (await fetchAt(`https://${report.host}/hello.txt`)).status;
      report.closedPort = await fetchAt(`https://${sbx.getHost(8001)}/`, token);
      const other = await Sandbox.create({ apiKey: process.env.E2B_OTHER_KEY, network: { denyOut: ["0.0.0.0/0"] } });
      try {
        report.otherKeyToken = (await fetchAt(`https://${report.host}/hello.txt`,
                                              { "E2B-Traffic-Access-Token": other.trafficAccessToken })).status;
      } finally {
        await other.kill();
      }
    } finally {
      await sbx.kill();
    }
    report.afterKill = (await fetchAt(`https://${report.host}/hello.txt`,
                                      { "E2B-Traffic-Access-Token": sbx.trafficAccessToken })).status;
  },

  // @e2b/desktop's stream: stream.getUrl()'s page fetched as a browser opens it, and the
  // WebSocket noVNC opens (/websockify) through nsbox-http to x11vnc, which greets with RFB.
  async desktopStream() {
    const sbx = await desktop.Sandbox.create({ resolution: [800, 600], timeoutMs: 120000,
                                               network: { denyOut: ["0.0.0.0/0"] } });
    try {
      report.sandboxId = sbx.sandboxId;
      await sbx.stream.start();
      report.streamUrl = sbx.stream.getUrl();
      const token = { "E2B-Traffic-Access-Token": sbx.trafficAccessToken };
      const page = await until("noVNC's page", async () => {
        const r = await fetchAt(report.streamUrl, token);
        return r.status === 200 && r.body;
      }, 30000);
      report.page = page.includes("noVNC");
      const ws = new URL("/websockify", report.streamUrl).href;
      const origin = { Origin: new URL(report.streamUrl).origin };
      // x11vnc may still be starting: websockify then ends the WebSocket at once (a reset)
      report.websocket = await until("x11vnc's greeting", async () => {
        const r = await fetchAt(ws, { ...token, ...origin }, true).catch((e) => ({ error: e.message }));
        report.websocketLast = r;
        return r.status === 101 && /RFB 003\.00\d/.test(r.data) && r;
      }, 30000);
      report.greeting = report.websocket.data.match(/RFB 003\.00\d/)[0];
      await sbx.stream.stop();
    } finally {
      await sbx.kill();
    }
  },
};

try {
  await scenarios[process.argv[2]]();
} catch (e) {
  report.exception = `${errorName(e)}: ${e && e.stack ? e.stack : e}`;
}
console.log(JSON.stringify(report));

// SPDX-License-Identifier: Apache-2.0
// Playwright (playwright-core, no browser of its own: executablePath unset)
// connected over CDP to the Chromium inside an nsbox sandbox, as an agent's
// browser_use or Playwright would be. Run by tests/integration/browser/:
//   PLAYWRIGHT_DIR=... node cdp.mjs CDP_URL STEPS_JSON
// STEPS_JSON is a list of {goto, click?, text?, screenshot?, crash?}; prints one
// JSON line, a result per step: {status?, error?, text?, screenshot_bytes?, crashed?}.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.PLAYWRIGHT_DIR, "node_modules", "x.js"));
const { chromium } = require("playwright-core");

const [cdpUrl, stepsJson] = process.argv.slice(2);
const steps = JSON.parse(stepsJson);
const browser = await chromium.connectOverCDP(cdpUrl, { timeout: 30000 });
const context = browser.contexts()[0] ?? (await browser.newContext());
const page = await context.newPage();
const results = [];
for (const step of steps) {
  const r = {};
  try {
    const response = await page.goto(step.goto, { timeout: 20000 });
    r.status = response ? response.status() : null;
    if (step.click) await page.click(step.click, { timeout: 10000 });
    if (step.text) r.text = await page.textContent(step.text, { timeout: 10000 });
    if (step.screenshot) r.screenshot_bytes = (await page.screenshot()).length;
    if (step.crash) {
      // Page.crash never answers: its renderer is gone.
      (await context.newCDPSession(page)).send("Page.crash").catch(() => {});
      r.crashed = await new Promise((resolve) => {
        page.once("crash", () => resolve(true));
        setTimeout(() => resolve(false), 10000);
      });
    }
  } catch (e) {
    r.error = String(e.message).split("\n")[0];
  }
  results.push(r);
}
results.push({ version: browser.version() });
console.log(JSON.stringify(results));
// Over CDP, close() disconnects (the sandbox's Chromium runs on); a page
// left on an error may keep it waiting: the results are out, so bounded.
await Promise.race([browser.close(), new Promise((resolve) => setTimeout(resolve, 5000))]);
process.exit(0);

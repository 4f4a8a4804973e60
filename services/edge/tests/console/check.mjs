// Checks the edge's web console in a real headless Chromium: sends a message, waits for the
// streamed turn, checks its route and role, then waits for the routing analytics to chart it.
//
//   node check.mjs <base-url> <out-dir>
//   node check.mjs <base-url> <out-dir> roles
//
// With `roles`, it opens the "Tool access by role" view instead, waits for it to load, writes
// <out-dir>/console-roles.png and prints, per role, the tools it may and may not use.
//
// Writes <out-dir>/console-turn.png and <out-dir>/console-charts.png and prints one JSON line
// (route, role, answer length, stats total) on stdout. Any failure, including an error in the
// browser's console, is told on stderr with a non-zero exit.
//
// playwright-core is found through NODE_PATH (scripts/install-tools.sh puts it in
// .tools/npm/node_modules; the `.tools/bin/edge-console-check` launcher sets it), else in the
// repository's .tools/npm. It drives Debian's /usr/bin/chromium, never a downloaded browser.

import { createRequire } from "node:module";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
// These matter on the project's machines: no sandbox as root, no GPU, and no background
// traffic to hosts the network does not reach.
const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];
const MESSAGE = "Hello there";
const TURN_TIMEOUT_MS = 60_000;
const STATS_TIMEOUT_MS = 30_000;
const OVERALL_TIMEOUT_MS = 150_000;

class CheckFailed extends Error {}

function fail(message) {
  throw new CheckFailed(message);
}

function loadPlaywright() {
  const here = fileURLToPath(import.meta.url);
  const repoTools = resolve(here, "../../../../../.tools/npm/");
  // A CommonJS require honours NODE_PATH, which ES module imports do not.
  for (const base of [here, join(repoTools, "package.json")]) {
    try {
      return createRequire(base)("playwright-core");
    } catch (error) {
      if (error.code !== "MODULE_NOT_FOUND") throw error;
    }
  }
  fail(`playwright-core not found: set NODE_PATH to .tools/npm/node_modules (scripts/install-tools.sh installs it)`);
}

async function run(baseUrl, outDir, mode) {
  const { chromium } = loadPlaywright();
  mkdirSync(outDir, { recursive: true });
  const userDataDir = mkdtempSync(join(tmpdir(), "switchyard-console-"));
  const consoleErrors = [];
  let context;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
      viewport: { width: 1280, height: 800 },
      colorScheme: "light",
      timeout: 60_000,
    });
    const page = context.pages()[0] || (await context.newPage());
    page.on("console", (message) => {
      if (message.type() === "error") {
        const where = message.location()?.url;
        consoleErrors.push(`${message.text()}${where ? ` (${where})` : ""}`);
      }
    });
    page.on("pageerror", (error) => consoleErrors.push(`uncaught: ${error.message}`));
    page.on("requestfailed", (request) => {
      // A stopped stream is not a failure; anything else the page could not load is.
      const reason = request.failure()?.errorText || "failed";
      if (!reason.includes("ERR_ABORTED")) consoleErrors.push(`request failed: ${request.url()}: ${reason}`);
    });

    const response = await page.goto(baseUrl, { waitUntil: "load", timeout: 30_000 });
    if (!response || !response.ok()) fail(`GET ${baseUrl} answered ${response ? response.status() : "nothing"}`);
    await page.locator("#chat-form").waitFor({ state: "visible", timeout: 10_000 });
    if (mode === "roles") {
      const roles = await checkRoles(page, outDir);
      if (consoleErrors.length) fail("the browser console reported errors");
      return { roles };
    }

    // One turn, streamed.
    await page.locator("#chat-input").fill(MESSAGE);
    await page.locator("#send").click();
    const turn = page.locator(".turn").last();
    await turn.waitFor({ state: "attached", timeout: 10_000 });
    try {
      await page.waitForFunction(
        () => {
          const turns = document.querySelectorAll(".turn");
          const last = turns[turns.length - 1];
          return last && last.dataset.state !== "streaming";
        },
        null,
        { timeout: TURN_TIMEOUT_MS, polling: 100 },
      );
    } catch {
      fail(`the turn did not complete within ${TURN_TIMEOUT_MS / 1000} s: ${await turnSummary(turn)}`);
    }
    const outcome = await turn.getAttribute("data-state");
    if (outcome !== "done") {
      const why = (await turn.locator(".turn-error").allTextContents()).join("; ");
      fail(`the turn ended in state ${outcome}: ${why || (await turnSummary(turn))}`);
    }
    const answer = ((await turn.locator(".answer").textContent()) || "").trim();
    if (!answer) fail("the answer is empty");
    const route = (await turn.getAttribute("data-route")) || "";
    const badge = ((await turn.locator(".route-badge").textContent()) || "").trim();
    if (!route || route === "unspecified" || !badge || !(await turn.locator(".route-badge").isVisible())) {
      fail(`no route shown (data-route "${route}", badge "${badge}")`);
    }
    const role = (await turn.getAttribute("data-role")) || "";
    const roleText = ((await turn.locator(".role").textContent()) || "").trim();
    if (!role || !roleText.includes(role)) fail(`no role shown (data-role "${role}", text "${roleText}")`);
    await turn.scrollIntoViewIfNeeded();
    await screenshotAround(page, turn, join(outDir, "console-turn.png"));

    // The analytics, counting that turn.
    const total = await waitForStats(page);
    const routeBars = await page.$$eval('#charts svg[data-chart="routes"] .bar', (bars) =>
      bars.filter((bar) => Number(bar.dataset.value) > 0 && bar.getBBox().width > 0).length,
    );
    if (routeBars < 1) fail("the route chart has no bar");
    for (const name of ["latency", "rates", "cost"]) {
      if ((await page.locator(`#charts svg[data-chart="${name}"]`).count()) !== 1) fail(`no ${name} chart`);
    }
    await page.locator("section.analytics").screenshot({ path: join(outDir, "console-charts.png") });

    if (consoleErrors.length) fail("the browser console reported errors");
    return { route, role, answer_chars: answer.length, stats_total: total, route_bars: routeBars };
  } catch (error) {
    // What the browser said is often the reason for whatever failed.
    if (consoleErrors.length) {
      error.message += `\nbrowser console errors:\n  ${consoleErrors.join("\n  ")}`;
    }
    throw error;
  } finally {
    if (context) await context.close().catch(() => {});
    rmSync(userDataDir, { recursive: true, force: true });
  }
}

// Opens the role view and reads, per role, the tools shown as usable and as not allowed.
async function checkRoles(page, outDir) {
  await page.locator("#roles > summary").click();
  try {
    await page.waitForFunction(() => ["ready", "empty", "error"].includes(document.querySelector("#roles")?.dataset.state), null, {
      timeout: 30_000,
      polling: 100,
    });
  } catch {
    fail("the role view did not load within 30 s");
  }
  const state = await page.locator("#roles").getAttribute("data-state");
  if (state !== "ready") fail(`the role view is ${state}: ${await page.locator("#roles-message").textContent()}`);
  const roles = await page.$$eval("#roles-list .role-access", (articles) =>
    Object.fromEntries(
      articles.map((article) => [
        article.dataset.role,
        {
          allowed: [...article.querySelectorAll(".role-server .tool-chip")].map((chip) => chip.dataset.tool),
          pinned: [...article.querySelectorAll(".tool-chip.pinned")].map((chip) => chip.dataset.tool),
          denied: [...article.querySelectorAll(".tool-chip.denied")].map((chip) => chip.dataset.tool),
          visible: article.getBoundingClientRect().height > 0,
        },
      ]),
    ),
  );
  await page.locator("#roles").scrollIntoViewIfNeeded();
  await page.locator("#roles").screenshot({ path: join(outDir, "console-roles.png") });
  return roles;
}

// The turn's visible state, for a failure message.
async function turnSummary(turn) {
  const text = ((await turn.textContent().catch(() => "")) || "").replace(/\s+/g, " ").trim();
  return text ? `"${text.slice(0, 300)}"` : "(empty turn)";
}

// A screenshot of the element with a margin of its surroundings.
async function screenshotAround(page, locator, path) {
  const box = await locator.boundingBox();
  if (!box) fail("the turn is not on screen");
  const margin = 16;
  const viewport = page.viewportSize();
  const x = Math.max(0, box.x - margin);
  const y = Math.max(0, box.y - margin);
  await page.screenshot({
    path,
    clip: {
      x,
      y,
      width: Math.min(viewport.width - x, box.width + 2 * margin),
      height: Math.min(viewport.height - y, box.height + 2 * margin),
    },
  });
}

// Waits for charts counting at least one decision; the record of a turn may land a moment after
// its answer, so the console's refresh button is pressed while waiting.
async function waitForStats(page) {
  const deadline = Date.now() + STATS_TIMEOUT_MS;
  for (;;) {
    const { state, total, message } = await page.evaluate(() => ({
      state: document.querySelector("#charts")?.dataset.state,
      total: Number(document.querySelector("#stats-total")?.dataset.value || 0),
      message: document.querySelector("#stats-message")?.textContent || "",
    }));
    if (state === "ready" && total >= 1) return total;
    if (Date.now() > deadline) {
      fail(`the charts did not show a decision within ${STATS_TIMEOUT_MS / 1000} s (state ${state}, total ${total}${message ? `: ${message}` : ""})`);
    }
    await page.waitForTimeout(1_000);
    if (state !== "loading") await page.locator("#stats-refresh").click();
    await page.waitForTimeout(500);
  }
}

async function main() {
  const [baseUrl, outDir, mode] = process.argv.slice(2);
  if (!baseUrl || !outDir) {
    console.error("usage: node check.mjs <base-url> <out-dir>");
    process.exit(2);
  }
  const timer = setTimeout(() => {
    console.error(`console check: gave up after ${OVERALL_TIMEOUT_MS / 1000} s`);
    process.exit(1);
  }, OVERALL_TIMEOUT_MS);
  try {
    const summary = await run(baseUrl, resolve(outDir), mode);
    console.log(JSON.stringify(summary));
  } catch (error) {
    // Playwright's messages say what it was doing; a stack only helps with a bug in this script.
    const playwrightError = /^(page|locator|browserType|elementHandle)\./.test(error.message || "") || error.name === "TimeoutError";
    const why = error instanceof CheckFailed || playwrightError ? error.message : error.stack || String(error);
    console.error(`console check failed: ${why}`);
    process.exitCode = 1;
  } finally {
    clearTimeout(timer);
  }
}

await main();

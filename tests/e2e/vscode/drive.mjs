// Drives a real VS Code workbench (code-server) in Debian's Chromium with Playwright and writes
// what a user would see into a JSON report; tests/e2e/test_vscode.py starts code-server, runs
// this once, and asserts on the report (one workbench session for every check).
//
// Usage: node drive.mjs config.json   (config written by test_vscode.py; see `cfg.*` below)
// Every step runs even when an earlier one failed, so one report shows every broken feature;
// a failed step records its error and a screenshot `<step>-failed.png`.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const cfg = JSON.parse(readFileSync(process.argv[2], "utf8"));
const { chromium } = createRequire(path.join(cfg.toolsHome, "package.json"))("playwright-core");

const report = { steps: {}, console: [], blocked: [] };
const t0 = Date.now();
const log = (...args) => console.error(`[${((Date.now() - t0) / 1000).toFixed(1)}s]`, ...args);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value; throws `what` after `timeout` ms. */
async function until(what, fn, timeout = cfg.timeoutMs ?? 30_000, every = 250) {
  const end = Date.now() + timeout;
  let last;
  while (Date.now() < end) {
    try {
      last = await fn();
      if (last) return last;
    } catch (error) {
      last = error;
    }
    await sleep(every);
  }
  throw new Error(`timed out after ${timeout / 1000} s waiting for ${what}${last instanceof Error ? ` (${last.message})` : ""}`);
}

const context = await chromium.launchPersistentContext(cfg.profileDir, {
  executablePath: cfg.chromium,
  headless: true,
  viewport: { width: 1440, height: 900 },
  args: [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    // Everything stays on loopback: any other host fails to resolve.
    '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1',
  ],
});
await context.route("**/*", (route) => {
  const url = new URL(route.request().url());
  if (url.hostname === "127.0.0.1" || url.protocol === "data:" || url.protocol === "blob:") return route.continue();
  report.blocked.push(url.href);
  return route.abort();
});
const page = context.pages()[0] ?? (await context.newPage());
page.on("console", (msg) => {
  if (msg.type() === "error") report.console.push(msg.text().slice(0, 500));
});

async function shot(name) {
  const file = path.join(cfg.artifacts, `${name}.png`);
  try {
    await page.screenshot({ path: file });
    return file;
  } catch (error) {
    log(`screenshot ${name} failed: ${error}`);
    return undefined;
  }
}

async function step(name, fn) {
  const started = Date.now();
  log(`step ${name}`);
  try {
    report.steps[name] = { ok: true, ...(await fn()) };
  } catch (error) {
    log(`step ${name} failed: ${error.stack ?? error}`);
    report.steps[name] = { ok: false, error: String(error.stack ?? error), screenshot: await shot(`${name}-failed`) };
    await page.keyboard.press("Escape").catch(() => {});
  }
  report.steps[name].seconds = (Date.now() - started) / 1000;
}

// --- workbench helpers ------------------------------------------------------------------------------

const visibleText = (selector) => page.evaluate((sel) => [...document.querySelectorAll(sel)]
  .filter((el) => el.offsetParent !== null || el.getClientRects().length > 0)
  .map((el) => el.innerText), selector);

/** Types into an input: `fill()` sets the value without the key events VS Code listens to. */
async function typeInto(input, text) {
  await input.focus(); // not click(): badges ("Showing 1 of 40") sit over the Problems filter
  await page.keyboard.press("Control+A");
  await page.keyboard.press("Backspace");
  if (text) await page.keyboard.type(text);
}

async function quickInput(prefix, text) {
  await page.keyboard.press(prefix);
  const input = page.locator(".quick-input-widget input").first();
  await input.waitFor({ state: "visible" });
  await page.keyboard.type(text); // the quick input has the focus already
}

const activeTab = () => page.evaluate(() => [...document.querySelectorAll(".tabs-container .tab.active")]
  .map((el) => el.getAttribute("aria-label") ?? ""));

async function openFile(name) {
  await focusWorkbench();
  await quickInput("Control+P", name);
  await until(`"${name}" in Quick Open`, async () =>
    (await visibleText(".quick-input-widget .monaco-list-row")).some((t) => t.includes(name)));
  // Click the matching row: Enter opens whichever row is selected, and while Quick Open is still
  // filtering under load that can be a recently opened file instead.
  await page.locator(".quick-input-widget .monaco-list-row").filter({ hasText: name }).first().click();
  await until(`the editor tab of ${name}`, async () => (await activeTab()).some((t) => t.startsWith(name)));
  const body = name.endsWith(".ipynb") ? ".editor-instance .notebook-editor" : ".editor-instance .monaco-editor .view-lines";
  await page.locator(body).first().waitFor({ state: "visible" });
}

async function runCommand(title) {
  await focusWorkbench();
  await quickInput("F1", `>${title}`);
  await until(`the command "${title}" in the Command Palette`, async () =>
    (await visibleText(".quick-input-widget .monaco-list-row")).some((t) => t.split("\n")[0] === title));
  // Click the row itself: Enter would run whichever row is first (fuzzy matches, recently used).
  await page.locator(".quick-input-widget .monaco-list-row").filter({ hasText: title }).first().click();
}

/** Gives the keyboard back to the workbench (a closed webview or a menu may hold the focus). */
async function focusWorkbench() {
  await page.keyboard.press("Escape");
  await page.locator(".part.sidebar .composite.title").first().click();
}

/** Saves the active editor and waits until `file` on disk differs from `before`. */
async function saveAndRead(file, before) {
  await runCommand("File: Save");
  return until(`${file} saved`, async () => {
    const disk = readFileSync(path.join(cfg.workspace, file), "utf8");
    return disk !== before ? disk : undefined;
  });
}

const readDisk = (file) => readFileSync(path.join(cfg.workspace, file), "utf8");

/** Puts the cursor at a 1-based line and column and checks that the status bar agrees. */
async function goTo(line, column) {
  await quickInput("Control+G", `${line}:${column}`);
  await page.keyboard.press("Enter");
  await until(`the cursor at Ln ${line}, Col ${column}`, async () =>
    (await visibleText("#status\\.editor\\.selection")).some((t) => t.includes(`Ln ${line}, Col ${column}`)));
}

async function problemRows(filter) {
  await typeInto(page.locator(".part.panel .markers-panel-action-filter input, .part.panel input[placeholder*='Filter']").first(), filter);
  await sleep(300); // the list filters after a short debounce
  return visibleText(".part.panel .markers-panel .monaco-list-row");
}

async function perflspStatus() {
  // The item's accessibility label (set by the extension) is the tooltip's text: state and version.
  return page.evaluate(() => [...document.querySelectorAll(".part.statusbar [aria-label]")]
    .map((el) => el.getAttribute("aria-label") ?? "").filter((l) => l.startsWith("perflsp:")));
}

async function notifications() {
  return visibleText(".notifications-toasts .notification-list-item, .notifications-center .notification-list-item");
}

async function clearNotifications() {
  await runCommand("Notifications: Clear All Notifications");
}

// --- the scenario --------------------------------------------------------------------------------------

const url = `${cfg.url}/?folder=${encodeURIComponent(cfg.workspace)}`;
log(`opening ${url}`);
await page.goto(url, { waitUntil: "domcontentloaded" });
await step("workbench", async () => {
  await page.locator(".monaco-workbench").waitFor({ state: "visible", timeout: 60_000 });
  await until("the explorer", async () => (await visibleText(".explorer-folders-view .monaco-list-row")).length > 0, 60_000);
  return {};
});

const { hover, quickfix, problems, fixAll, profile, ruleDocs, notebook, restart } = cfg.scenario;

await step("server", async () => {
  await openFile(hover.file);
  // The extension activates on the first Python file; the status bar shows the server's state.
  const status = await until("perflsp's status bar item saying the server runs", async () => {
    const items = await perflspStatus();
    return items.find((l) => l.includes("is running")) ? items : undefined;
  }, 60_000);
  return { status };
});

await step("problems", async () => {
  await page.keyboard.press("Control+Shift+M");
  await page.locator(".part.panel .markers-panel").first().waitFor({ state: "visible" });
  const rows = {};
  for (const code of problems.present) {
    rows[code] = await until(`a perflsp ${code} row in the Problems panel`, async () => {
      const found = (await problemRows(code)).filter((t) => t.includes(code));
      return found.length ? found : undefined;
    }, 60_000);
  }
  await shot("problems-filtered");
  // A code switched off in the workspace settings: give the server time to have listed everything
  // (the present codes are there), then check that none of it shows up.
  const ignored = {};
  for (const code of problems.absent) ignored[code] = (await problemRows(code)).filter((t) => t.includes(code));
  await problemRows("");
  const all = await until("the unfiltered list", async () => {
    const list = await visibleText(".part.panel .markers-panel .monaco-list-row");
    return list.length ? list : undefined;
  });
  return { rows, ignored, visibleRows: all };
});

await step("hover", async () => {
  await openFile(hover.file);
  await goTo(hover.line, hover.column);
  // Hovering with the mouse (what users do); `locator.hover()` would time out because
  // `.view-lines` intercepts the pointer, so move the mouse onto the squiggle under the cursor.
  const cursor = await page.locator(".editor-instance .monaco-editor .cursors-layer .cursor").first().boundingBox();
  if (!cursor) throw new Error("no cursor in the editor");
  await page.mouse.move(cursor.x + 200, cursor.y - 120);
  await sleep(200);
  await page.mouse.move(cursor.x + 10, cursor.y + cursor.height / 2, { steps: 4 });
  const text = await until(`a hover mentioning ${hover.code}`, async () =>
    (await visibleText(".monaco-hover")).find((t) => t.includes(hover.code)), 20_000);
  // The hover lists the diagnostics first, then perflsp's explanation: scroll to the explanation
  // so the screenshot (the README's) shows it.
  await page.evaluate((code) => {
    const hoverEl = [...document.querySelectorAll(".monaco-hover")].find((el) => el.innerText.includes("Why is this bad?"));
    const title = hoverEl && [...hoverEl.querySelectorAll("p")].find((p) => p.innerText.startsWith(`${code} `));
    title?.scrollIntoView({ block: "start" });
  }, hover.code);
  await sleep(300); // let the hover finish rendering before the screenshot
  const screenshot = await shot("hover");
  await page.mouse.move(10, 10);
  await page.keyboard.press("Escape");
  return { text, screenshot };
});

await step("quickfix", async () => {
  await openFile(quickfix.file);
  await goTo(quickfix.line, quickfix.column);
  await page.keyboard.press("Control+.");
  const rowSelector = ".action-widget .monaco-list-row, .context-view .monaco-list .monaco-list-row";
  const titles = await until("the quick fix menu", async () => {
    const t = await visibleText(rowSelector);
    return t.some((x) => x.includes(quickfix.title)) ? t : undefined;
  });
  const screenshot = await shot("quickfix");
  const before = readDisk(quickfix.file);
  await page.locator(rowSelector).filter({ hasText: quickfix.title }).first().click();
  // Saving before the edit landed would save nothing: wait for the tab to turn dirty.
  await until("the fix in the editor (a dirty tab)", async () => (await page.locator(".tabs-container .tab.active.dirty").count()) > 0, 10_000);
  const text = await saveAndRead(quickfix.file, before);
  return { titles, screenshot, text };
});

await step("ruleDocs", async () => {
  await openFile(ruleDocs.file);
  await goTo(ruleDocs.line, ruleDocs.column);
  await runCommand("perflsp: Open rule documentation");
  const tabs = await until(`a tab showing ${ruleDocs.code}`, async () => {
    const t = await page.evaluate(() => [...document.querySelectorAll(".tabs-container .tab")].map((el) => el.getAttribute("aria-label") ?? ""));
    return t.some((x) => x.includes(ruleDocs.code)) ? t : undefined;
  });
  // The Markdown preview renders in a webview: an iframe inside an iframe.
  const text = await until(`the rendered page of ${ruleDocs.code}`, async () => {
    for (const frame of page.frames()) {
      const body = await frame.evaluate(() => document.body?.innerText ?? "").catch(() => "");
      if (body.includes(ruleDocs.code) && body.includes("Why is this bad?")) return body;
    }
    return undefined;
  });
  const screenshot = await shot("rule-docs");
  await focusWorkbench();
  await runCommand("View: Close Editor");
  return { tabs, text, screenshot };
});

await step("fixAll", async () => {
  await openFile(fixAll.file);
  // The fix-all action is computed from the file's findings: wait until they are in.
  await until(`squiggles in ${fixAll.file}`, async () =>
    (await page.locator(".editor-instance .monaco-editor [class*='squiggly-']").count()) > 0, 60_000);
  const before = readDisk(fixAll.file);
  await runCommand("perflsp: Fix all perflsp findings");
  await until("the fixes in the editor (a dirty tab)", async () => (await page.locator(".tabs-container .tab.active.dirty").count()) > 0, 20_000);
  const screenshot = await shot("fix-all");
  const text = await saveAndRead(fixAll.file, before);
  return { text, screenshot };
});

await step("notebook", async () => {
  await openFile(notebook.file);
  // Findings on the cells of an open notebook reach the cell editors (notebook document sync);
  // the Problems panel alone could also come from the workspace scan of the file on disk.
  const squiggles = await until(`squiggles in the cells of ${notebook.file}`, async () => {
    const n = await page.locator(".notebook-editor .cell-editor-container [class*='squiggly-']").count();
    return n > 0 ? n : undefined;
  }, 60_000);
  const rows = await until(`a ${notebook.code} row for the notebook in the Problems panel`, async () => {
    const found = (await problemRows(notebook.code)).filter((t) => t.includes(notebook.text));
    return found.length ? found : undefined;
  });
  await problemRows("");
  return { squiggles, rows, screenshot: await shot("notebook") };
});

await step("profile", async () => {
  await clearNotifications();
  await openFile(profile.file);
  await goTo(profile.line, profile.column);
  await runCommand("perflsp: Profile this function");
  // The progress toast says "perflsp: measuring NAME"; the answer is another toast.
  const messages = await until("perflsp's answer to Profile this function", async () => {
    const t = await notifications();
    return t.some((x) => x.includes("perflsp:") && !x.includes("perflsp: measuring ")) ? t : undefined;
  }, profile.timeoutMs);
  // The measurements come back into the editor: diagnostics on the function's lines (the file has
  // no static findings) and the code lens above it. Empty when the server cannot profile.
  const lenses = await until("the code lens with the verdict", async () => {
    const t = await visibleText(".editor-instance .monaco-editor .codelens-decoration");
    return t.some((x) => x.includes("-bound")) ? t : undefined;
  }, 15_000).catch(() => []);
  const squiggles = await page.locator(".editor-instance .monaco-editor [class*='squiggly-']").count();
  return { messages, lenses, squiggles, screenshot: await shot("profile") };
});

await step("restart", async () => {
  // A broken perflsp.path restarts the server, which reports the broken command; restoring the
  // setting restarts it again. The workspace settings file is edited on disk, as a user (or git) would.
  const file = path.join(cfg.workspace, ".vscode", "settings.json");
  const good = readFileSync(file, "utf8");
  await clearNotifications();
  writeFileSync(file, JSON.stringify({ ...JSON.parse(good), "perflsp.path": [restart.brokenPath] }, null, 2));
  const error = await until("the error about the broken perflsp.path", async () =>
    (await notifications()).find((t) => t.includes("perflsp.path") && t.includes(restart.brokenPath)));
  const failedStatus = await until("the status bar showing the failure", async () => {
    const items = await perflspStatus();
    return items.some((l) => l.includes("does not work")) ? items : undefined;
  });
  const screenshot = await shot("broken-path");
  await clearNotifications();
  writeFileSync(file, good);
  const status = await until("the server running again", async () => {
    const items = await perflspStatus();
    return items.some((l) => l.includes("is running")) ? items : undefined;
  }, 60_000);
  return { error, failedStatus, status, screenshot };
});

report.status = await perflspStatus().catch(() => []);
report.seconds = (Date.now() - t0) / 1000;
await context.close();
writeFileSync(cfg.report, JSON.stringify(report, null, 2));
log("done");

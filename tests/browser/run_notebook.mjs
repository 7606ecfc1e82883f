// Opens a notebook in JupyterLab (headless chromium), runs all cells, waits for the chart,
// and takes a screenshot. Exits non-zero if a cell fails or no chart appears.
import { chromium } from "playwright-core";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [url, screenshot] = process.argv.slice(2);
const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "eager-chromium-")), {
  executablePath: "/usr/bin/chromium",
  headless: true,
  viewport: { width: 1400, height: 1000 },
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = browser.pages()[0] ?? (await browser.newPage());
page.setDefaultTimeout(900_000);
await page.goto(url);
await page.waitForSelector(".jp-Notebook .jp-Cell");
// The kernel is up when the status shows Idle.
await page.waitForSelector("text=Rust (eager) | Idle", { timeout: 900_000 });
await page.click("text=Run", { position: { x: 5, y: 5 } });
await page.click("text=Run All Cells");
// The last cell draws the session's timeline as an SVG chart.
await page.waitForSelector(".jp-OutputArea-output svg, .jp-RenderedSVG img", { timeout: 900_000 });
await page.waitForSelector("text=Rust (eager) | Idle");
// JupyterLab's news prompt would cover the chart.
const no = page.getByRole("button", { name: "No", exact: true });
if (await no.count()) { await no.first().click(); await page.waitForTimeout(1500); }
const errors = await page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count();
const tensors = await page.locator("text=0.0159, 0.1173, 0.8668").count();
await page.locator(".jp-OutputArea-output svg, .jp-RenderedSVG img").last().scrollIntoViewIfNeeded();
await page.screenshot({ path: screenshot, fullPage: false });
await browser.close();
console.log(`screenshot: ${screenshot}; tensor outputs: ${tensors}; error outputs: ${errors}`);
if (tensors === 0 || errors > 0) process.exit(1);

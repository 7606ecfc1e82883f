// Opens notebooks/04-training.ipynb (outputs cleared) in JupyterLab (headless chromium), runs
// all cells, and watches its live cell: the progress bar must redraw in place (one bar whose
// value is seen to grow while the loop runs, not a bar appended per update) up to 300/300,
// and the live loss chart and the memory chart must show. Screenshot of the live cell after
// the updates. Exits non-zero otherwise.
import { runAll, dismissNews } from "./lab.mjs";

const [url, screenshot] = process.argv.slice(2);
const { browser, page } = await runAll(url, { width: 1400, height: 1100 });
// The bar appears when the live cell starts; sample it while the loop runs.
const bar = page.locator(".eager-progress progress");
try {
  await bar.first().waitFor({ state: "attached", timeout: 600_000 });
} catch (e) {
  // What the page showed instead (a failed cell, say), for whoever reads the log.
  await page.screenshot({ path: screenshot, fullPage: false });
  const shown = await page.locator(".jp-OutputArea-output").allInnerTexts();
  console.error(`no progress bar; screenshot ${screenshot}; outputs:\n${shown.join("\n---\n").slice(-4000)}`);
  await browser.close();
  process.exit(1);
}
const seen = new Set();
let bars = 0;
for (let i = 0; i < 400; i++) {
  bars = Math.max(bars, await bar.count());
  const v = Number(await bar.first().getAttribute("value"));
  seen.add(v);
  if (v >= 300) break;
  await page.waitForTimeout(25);
}
await page.waitForSelector("text=live run: accuracy");
await page.waitForSelector("text=Rust (eager) | Idle");
await dismissNews(page);
const cell = page.locator(".jp-Cell", { has: page.locator(".eager-progress") });
const outputs = await cell.locator(".jp-OutputArea-output").count();
const charts = await cell.locator(".jp-RenderedSVG img, .jp-OutputArea-output svg").count();
const finalValue = Number(await bar.first().getAttribute("value"));
const barsNow = await bar.count();
const errors = await page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count();
const memory = page.locator(".jp-Cell", { hasText: "viz::memory_chart()" });
const memoryCharts = await memory.locator(".jp-RenderedSVG img, .jp-OutputArea-output svg").count();
await cell.scrollIntoViewIfNeeded();
await page.screenshot({ path: screenshot, fullPage: false });
await browser.close();
const growing = [...seen].filter((v) => v > 0 && v < 300).length;
console.log(`screenshot: ${screenshot}; bar values seen while running: ${[...seen].sort((a, b) => a - b).join(",")}; ` +
            `bars at most ${bars}, now ${barsNow}, final ${finalValue}; outputs of the live cell ${outputs}, ` +
            `charts ${charts}; memory charts ${memoryCharts}; error outputs ${errors}`);
// In place: one bar all along, seen between start and end, ending full; the cell holds the bar,
// the chart and the result (three outputs, not one per update); the memory chart shows.
if (bars !== 1 || barsNow !== 1 || growing < 1 || finalValue !== 300 || outputs !== 3 || charts !== 1 ||
    memoryCharts !== 1 || errors > 0) process.exit(1);

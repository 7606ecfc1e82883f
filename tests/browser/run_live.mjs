// Opens notebooks/04-training.ipynb (outputs cleared) in JupyterLab (headless chromium), runs
// all cells, and watches its live cell: the progress bar must redraw in place (one bar whose
// value is seen to grow while the loop runs, not a bar appended per update) up to 300/300,
// and the live loss chart and the memory chart must show. Screenshot of the live cell after
// the updates. Exits non-zero otherwise.
import { runAll, dismissNews } from "./lab.mjs";

const [url, screenshot] = process.argv.slice(2);
// Every value the bar takes, and how many bars there are, recorded by the page itself at each
// change of the document (no sampling: an update is seen however fast the loop runs).
const watch = () => {
  window.eagerBar = { values: [], most: 0 };
  new MutationObserver(() => {
    const bars = document.querySelectorAll(".eager-progress progress");
    window.eagerBar.most = Math.max(window.eagerBar.most, bars.length);
    for (const b of bars) window.eagerBar.values.push(Number(b.getAttribute("value")));
  }).observe(document, { subtree: true, childList: true, attributes: true, characterData: true });
};
const { browser, page } = await runAll(url, { width: 1400, height: 1100 }, watch);
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
await page.waitForFunction(() => window.eagerBar.values.includes(300));
const { values, most: bars } = await page.evaluate(() => window.eagerBar);
const seen = new Set(values);
await page.waitForSelector("text=live run: accuracy");
await page.waitForSelector("text=Rust (eager) | Idle");
await dismissNews(page);
const cell = page.locator(".jp-Cell", { has: page.locator(".eager-progress") });
const outputs = await cell.locator(".jp-OutputArea-output").count();
const charts = await cell.locator(".jp-OutputArea-output img.eager-chart, .jp-RenderedSVG img, .jp-OutputArea-output svg").count();
const finalValue = Number(await bar.first().getAttribute("value"));
const barsNow = await bar.count();
const errors = await page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count();
const memory = page.locator(".jp-Cell", { hasText: "viz::memory_chart()" });
// The kernel is idle between two cells of a run too: the chart's cell may not have run yet.
const memoryChart = memory.locator(".jp-OutputArea-output img.eager-chart, .jp-RenderedSVG img, .jp-OutputArea-output svg");
await memoryChart.first().waitFor({ state: "attached", timeout: 300_000 }).catch(() => {});
const memoryCharts = await memoryChart.count();
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

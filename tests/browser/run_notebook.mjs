// Opens a notebook in JupyterLab (headless chromium), runs all cells, waits for the chart,
// and takes a screenshot. Exits non-zero if a cell fails or no chart appears.
import { runAll, dismissNews } from "./lab.mjs";

const [url, screenshot] = process.argv.slice(2);
const { browser, page } = await runAll(url, { width: 1400, height: 1000 });
// The last cell draws the session's timeline as an SVG chart.
await page.waitForSelector(".jp-OutputArea-output svg, .jp-RenderedSVG img", { timeout: 900_000 });
await page.waitForSelector("text=Rust (eager) | Idle");
await dismissNews(page);
const errors = await page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count();
const tensors = await page.locator("text=0.0159, 0.1173, 0.8668").count();
await page.locator(".jp-OutputArea-output svg, .jp-RenderedSVG img").last().scrollIntoViewIfNeeded();
await page.screenshot({ path: screenshot, fullPage: false });
await browser.close();
console.log(`screenshot: ${screenshot}; tensor outputs: ${tensors}; error outputs: ${errors}`);
if (tensors === 0 || errors > 0) process.exit(1);

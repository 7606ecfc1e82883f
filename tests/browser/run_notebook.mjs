// Opens a notebook in JupyterLab (headless chromium), runs all cells, waits for the chart,
// checks that every chart fits its output area's width (JupyterLab scrolls a wide image: the
// 1200-px timeline was cut at the right edge), and takes a screenshot. Exits non-zero if a cell
// fails, no chart appears or a chart runs past its output area.
import { runAll, dismissNews } from "./lab.mjs";

const [url, screenshot] = process.argv.slice(2);
const { browser, page } = await runAll(url, { width: 1400, height: 1000 });
// The last cell draws the session's timeline as an SVG chart.
const charts = ".jp-OutputArea-output img.eager-chart, .jp-OutputArea-output svg, .jp-RenderedSVG img";
await page.waitForSelector(charts, { timeout: 900_000 });
await page.waitForSelector("text=Rust (eager) | Idle");
await dismissNews(page);
const errors = await page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").count();
const tensors = await page.locator("text=0.0159, 0.1173, 0.8668").count();
// Each chart's right edge against its output area's; its drawn width against its own.
const fits = await page.locator(charts).evaluateAll((els) =>
  els.map((el) => {
    const area = el.closest(".jp-OutputArea-output").getBoundingClientRect();
    const box = el.getBoundingClientRect();
    return { natural: el.naturalWidth ?? box.width, width: Math.round(box.width), over: Math.round(box.right - area.right) };
  }),
);
const overflowing = fits.filter((f) => f.over > 1);
await page.locator(charts).last().scrollIntoViewIfNeeded();
await page.screenshot({ path: screenshot, fullPage: false });
await browser.close();
console.log(`screenshot: ${screenshot}; tensor outputs: ${tensors}; error outputs: ${errors}; charts (natural/drawn width, px past the area): ${fits.map((f) => `${f.natural}/${f.width}/${f.over}`).join(" ")}`);
if (tensors === 0 || errors > 0 || fits.length === 0 || overflowing.length > 0) process.exit(1);

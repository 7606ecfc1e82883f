// Opens notebooks/03-what-eager-costs.ipynb (outputs cleared) in JupyterLab (headless chromium)
// with its widget manager (jupyterlab_widgets), runs all cells, and drags the batch-size slider
// of its last cell: the Rust closure must run again in the session and its Output must show the
// new batch's line and a redrawn chart (another image), within the output area. Screenshots
// before and after the drag. Exits non-zero otherwise.
import { runAll, dismissNews } from "./lab.mjs";

const [url, before, after] = process.argv.slice(2);
const { browser, page } = await runAll(url, { width: 1400, height: 1100 });
const fail = async (why) => {
  await page.screenshot({ path: after, fullPage: false });
  const shown = await page.locator(".jp-OutputArea-output").allInnerTexts();
  console.error(`${why}; screenshot ${after}; outputs:\n${shown.join("\n---\n").slice(-3000)}`);
  await browser.close();
  process.exit(1);
};
const slider = page.locator(".widget-slider .noUi-handle").first();
try {
  await slider.waitFor({ state: "visible", timeout: 900_000 });
  await page.waitForSelector(".widget-output >> text=/batch 128: loss/", { timeout: 300_000 });
} catch (e) {
  await fail(`no slider with its first run (${e.message.split("\n")[0]})`);
}
await page.waitForSelector("text=Rust (eager) | Idle");
await dismissNews(page);
const output = page.locator(".widget-output").last();
const image = output.locator("img").first();
const srcBefore = await image.getAttribute("src");
await slider.scrollIntoViewIfNeeded();
await page.screenshot({ path: before, fullPage: false });
// A drag, as a user's: press the handle, move left by a third of the track, release.
const track = await page.locator(".widget-slider .noUi-target").first().boundingBox();
const handle = await slider.boundingBox();
const [x, y] = [handle.x + handle.width / 2, handle.y + handle.height / 2];
await page.mouse.move(x, y);
await page.mouse.down();
for (let i = 1; i <= 10; i++) await page.mouse.move(x - (track.width / 3) * (i / 10), y);
await page.mouse.up();
const readout = (await page.locator(".widget-readout").first().innerText()).trim();
try {
  await page.waitForSelector(`.widget-output >> text=/batch ${readout}: loss/`, { timeout: 300_000 });
  await page.waitForFunction(
    ([sel, old]) => { const img = document.querySelectorAll(sel); const last = img[img.length - 1]; return last && last.src !== old; },
    [".widget-output img", srcBefore], { timeout: 120_000 });
} catch (e) {
  await fail(`the drag to ${readout} did not redraw (${e.message.split("\n")[0]})`);
}
await page.waitForSelector("text=Rust (eager) | Idle");
const lines = (await output.innerText()).split("\n").filter((l) => l.startsWith("batch "));
const area = await output.boundingBox();
const img = await image.boundingBox();
const errors = await page.locator(".widget-output [data-mime-type='application/vnd.jupyter.stderr']").count();
await output.scrollIntoViewIfNeeded();
await page.screenshot({ path: after, fullPage: false });
await browser.close();
console.log(`screenshots: ${before}, ${after}; slider dragged to ${readout}; output lines: ${JSON.stringify(lines)}; ` +
            `chart ${Math.round(img.width)} px wide, right edge ${Math.round(img.x + img.width - (area.x + area.width))} px ` +
            `past the output's; error outputs ${errors}`);
// The last run replaced the first: one line, the new batch's; the chart fits; no errors.
if (readout === "128" || lines.length !== 1 || !lines[0].startsWith(`batch ${readout}:`) ||
    img.x + img.width > area.x + area.width + 1 || errors > 0) process.exit(1);

// What both browser checks share: headless chromium (Debian's) on a fresh profile, a page on
// a JupyterLab notebook URL, and Run All once its kernel shows Idle.
import { chromium } from "playwright-core";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Opens `url` (a notebook in JupyterLab), waits for the kernel and runs all cells; `init`, if
 * given, runs in the page before JupyterLab's own scripts (an observer, say). */
export async function runAll(url, viewport, init) {
  const browser = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "eager-chromium-")), {
    executablePath: "/usr/bin/chromium",
    headless: true,
    viewport,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(900_000);
  if (init) await page.addInitScript(init);
  await page.goto(url);
  await page.waitForSelector(".jp-Notebook .jp-Cell");
  // The kernel is up when the status shows Idle.
  await page.waitForSelector("text=Rust (eager) | Idle", { timeout: 900_000 });
  await page.click("text=Run", { position: { x: 5, y: 5 } });
  await page.click("text=Run All Cells");
  return { browser, page };
}

/** Dismisses JupyterLab's news prompt, which would cover the outputs. */
export async function dismissNews(page) {
  const no = page.getByRole("button", { name: "No", exact: true });
  if (await no.count()) { await no.first().click(); await page.waitForTimeout(1500); }
}

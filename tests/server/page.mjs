// The web chat page in headless Chromium (Debian's chromium through
// puppeteer-core): load /, type a message, see a streamed reply appear,
// press stop, and save a screenshot as $SLUICE_SHOT.
import {createRequire} from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {URL_, KEY, test, assert, sleep, failed} from "./lib.mjs";

const req = createRequire(process.env.SLUICE_NPM_DIR + "/package.json");
const puppeteer = req("puppeteer-core");
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-chromium-"));
const browser = await puppeteer.launch({
  executablePath: process.env.SLUICE_CHROMIUM,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         `--user-data-dir=${profile}`],
});
try {
  const page = await browser.newPage();
  await page.setViewport({width: 1100, height: 760});
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  const outside = [];
  page.on("request", (r) => { if (!r.url().startsWith(URL_) && !r.url().startsWith("data:")) outside.push(r.url()); });

  await test("page: / loads from the binary with no outside requests", async () => {
    const r = await page.goto(URL_ + "/", {waitUntil: "networkidle0"});
    assert(r.status() === 200, "status " + r.status());
    assert((await page.title()) === "sluice", "title");
    if (KEY) await page.$eval("#key", (el, k) => { el.value = k; el.dispatchEvent(new Event("change")); }, KEY);
    assert(outside.length === 0, "outside requests: " + outside.join(" "));
    assert(errors.length === 0, "page errors: " + errors.join(" "));
  });

  await test("page: a typed message gets a streamed reply with the figures", async () => {
    await page.$eval("#maxtok", (el) => { el.value = "450"; });
    await page.$eval("#temp", (el) => { el.value = "0"; }); /* greedy: this model loops, never ends early */
    /* part of the reply shown while the stop button is live: it streams.
     * Latched on every change of the page, not polled: tinymoe writes the
     * 450 tokens in a few tenths of a second, and a poll that came after
     * the stream ended saw only a finished reply (a 60 s timeout in CI). */
    await page.evaluate(() => {
      window.streamedLive = false;
      const check = () => {
        const b = document.querySelectorAll(".msg.assistant .body");
        if (b.length && b[b.length - 1].textContent.trim().length > 20 && !document.querySelector("#stop").disabled)
          window.streamedLive = true;
      };
      new MutationObserver(check).observe(document.body,
                                          {subtree: true, childList: true, characterData: true, attributes: true});
    });
    await page.type("#input", "Tell me about the old house.");
    await page.click("#send");
    await page.waitForFunction(() => window.streamedLive, {timeout: 60000, polling: 20});
    const ttft = await page.$eval("#f-ttft", (el) => el.textContent);
    assert(/s$/.test(ttft), "time to first token not shown: " + ttft);
  });

  await test("page: stop ends the stream and the page is usable again", async () => {
    const before = await page.$eval(".msg.assistant:last-child .body", (el) => el.textContent.length);
    await page.click("#stop");
    await page.waitForFunction(() => document.querySelector("#stop").disabled && !document.querySelector("#send").disabled,
                               {timeout: 20000});
    const t = await page.$eval(".msg.assistant:last-child", (el) => el.textContent);
    assert(t.includes("[stopped]") || t.length > before, "no reply text");
    await sleep(300);
    await page.screenshot({path: process.env.SLUICE_SHOT});
    assert(fs.statSync(process.env.SLUICE_SHOT).size > 5000, "screenshot too small");
    assert(errors.length === 0, "page errors: " + errors.join(" "));
  });
} finally {
  await browser.close();
  fs.rmSync(profile, {recursive: true, force: true});
}
process.exit(failed() ? 1 : 0);

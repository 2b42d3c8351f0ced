// node browser_check.mjs KERNELS.wasm CASES.json [CHROMIUM]: serves replay.mjs, the module and
// the cases from 127.0.0.1, runs the replay in headless Chromium (driven by playwright-core,
// Debian's /usr/bin/chromium by default) and prints the results as JSON.
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const [modulePath, casesPath, executablePath = "/usr/bin/chromium"] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const files = {
  "/": ["text/html", async () => "<!doctype html><title>onnxplug-wasm portability</title>"],
  "/replay.mjs": ["text/javascript", () => readFile(join(here, "replay.mjs"))],
  "/kernels.wasm": ["application/wasm", () => readFile(modulePath)],
  "/cases.json": ["application/json", () => readFile(casesPath)],
};
const server = createServer(async (request, response) => {
  const entry = files[new URL(request.url, "http://127.0.0.1").pathname];
  if (!entry) {
    response.writeHead(404).end();
    return;
  }
  response.writeHead(200, { "content-type": entry[0] }).end(await entry[1]());
});
await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
const origin = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  await page.goto(origin + "/");
  const results = await page.evaluate(async () => {
    const { replay } = await import("/replay.mjs");
    const [bytes, cases] = await Promise.all([
      fetch("/kernels.wasm").then((r) => r.arrayBuffer()),
      fetch("/cases.json").then((r) => r.json()),
    ]);
    return replay(bytes, cases);
  });
  process.stdout.write(JSON.stringify({ engine: `chromium ${browser.version()}`, results }));
} finally {
  await browser.close();
  server.close();
}

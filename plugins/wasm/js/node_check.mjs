// node node_check.mjs KERNELS.wasm CASES.json: replays the cases in Node's V8 and prints the
// results as JSON (see replay.mjs).
import { readFile } from "node:fs/promises";
import { replay } from "./replay.mjs";

const [modulePath, casesPath] = process.argv.slice(2);
const cases = JSON.parse(await readFile(casesPath, "utf8"));
const results = await replay(await readFile(modulePath), cases);
process.stdout.write(JSON.stringify({ engine: `node ${process.version}`, results }));

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { loadScript, luaDir, scriptNames } from "../src/scripts";

const VECTORS = join(luaDir(), "..", "tests", "vectors");

test("every lua/ script flattens to the SHA-1 of tests/vectors/scripts.json, with its inputs", () => {
  const want = JSON.parse(readFileSync(join(VECTORS, "scripts.json"), "utf8")) as Record<string, {
    keys: string[]; keys_tail: string; args: string[]; args_tail: string; sha1: string;
  }>;
  const root = luaDir();
  assert.deepEqual(scriptNames(root), Object.keys(want).sort());
  for (const name of scriptNames(root)) {
    const s = loadScript(root, name);
    assert.deepEqual([s.keys, s.keysTail, s.args, s.argsTail],
      [want[name].keys, want[name].keys_tail, want[name].args, want[name].args_tail], name);
    assert.equal(s.sha, want[name].sha1, `${name}: the flattened source differs from the Python loader's`);
  }
});

/** The options checked and turned into a message, with no Redis (as Python's options.prepare). */
import assert from "node:assert/strict";
import { test } from "node:test";

import * as codec from "../src/codec";
import { InvalidArgumentError, newTaskId, prepare } from "../src/index";

test("a plain task: a generated id, the defaults left out of its message", () => {
  const p = prepare("email:send", { to: "a" }, {}, 1700000000000);
  assert.equal(p.queue, "default");
  assert.ok(p.generated && /^[A-Za-z0-9_][A-Za-z0-9_-]{15}$/.test(p.id));
  assert.equal(p.data.toString("hex"), codec.encode({ type: "email:send", payload: { to: "a" }, enqueued_at_ms: 1700000000000 }).toString("hex"));
  assert.equal(p.delayMs, 0);
  assert.equal(p.uniqueTtl, 0);
});

test("options fill their fields as the Python client's do", () => {
  const p = prepare("t", null, { taskId: "x", unique: 1.2, priority: 9, tenant: "acme", timeout: 0.0001, retention: 2, retryDelay: 3, maxRetry: 0, headers: { a: "b" }, processIn: 1.5 }, 1000);
  assert.equal(p.id, "x");
  assert.equal(p.generated, false);
  assert.equal(p.uniqueTtl, 2);
  assert.equal(p.delayMs, 1500);
  const m = codec.decode(p.data);
  assert.deepEqual([m.unique, m.priority, m.tenant, m.timeout_ms, m.retention_ms, m.retry_delay_ms, m.max_retry, m.headers],
    [true, 9, "acme", 1, 2000, 3000, 0, { a: "b" }]);
  assert.equal(prepare("t", null, { uniqueKey: "k" }).uniqueTtl, 86400);
  assert.equal(codec.decode(prepare("t", null, { timeout: null }).data).timeout_ms, 0);
  assert.equal(prepare("t", null, { processAt: 500 }, 1000).delayMs, 0);
  assert.equal(prepare("t", null, { processAt: new Date(3000) }, 1000).delayMs, 2000);
  assert.deepEqual(codec.decode(prepare("t", null, { queue: "q", after: ["a", ["r", "b"], { queue: "s", id: "c" }, "a"] }).data).after,
    [["q", "a"], ["r", "b"], ["s", "c"]]);
  assert.equal(prepare("t", null, { after: "a", onParentFailure: "run" }).policy, "r");
});

test("bad input is refused before anything is sent", () => {
  const bad: [string, object][] = [
    ["", {}], ["t", { queue: "bad{queue}" }], ["t", { priority: 10 }], ["t", { priority: 1.5 }],
    ["t", { key: "k", unique: 10 }], ["t", { after: "p", uniqueKey: "k" }], ["t", { after: "p", key: "k" }],
    ["t", { processIn: 1, processAt: 5 }], ["t", { processIn: -1 }], ["t", { unique: 0.5 }], ["t", { tenant: "" }],
    ["t", { tenant: "a\nb" }], ["t", { tenant: ".." }], ["t", { bogus: 1 }], ["t", { after: [] }],
    ["t", { onParentFailure: "maybe" }], ["t", { maxRetry: -1 }], ["t", { headers: { a: 1 } }], ["t", { taskId: "" }],
  ];
  for (const [type, options] of bad) {
    assert.throws(() => prepare(type, null, options as never), InvalidArgumentError, JSON.stringify(options));
  }
  assert.throws(() => prepare("t", () => 1, {}), InvalidArgumentError);
});

test("generated ids: 16 URL-safe characters, never a leading dash", () => {
  for (let i = 0; i < 2000; i++) {
    assert.match(newTaskId(), /^[A-Za-z0-9_][A-Za-z0-9_-]{15}$/);
  }
});

/**
 * The client against a real redis-server with asynqpy's Python workers processing what it
 * enqueues (tests/test_node_client.py starts them and sets the environment below); skipped
 * without ASYNQPY_TEST_REDIS_URL. The workers' handlers (tests/test_node_client.py):
 * add -> a + b; echo -> the payload; info -> the task's tenant, priority, key and parent
 * results as the worker read them; fail -> raises (max_retry 0: archived); order -> a counter
 * (the order tasks started in); slow -> sleeps 0.3 s.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import Redis from "ioredis";

import {
  Client, DuplicateTaskError, InvalidArgumentError, TaskFailedError, TaskIdConflictError, TaskNotFoundError,
  WaitTimeoutError, queueKey,
} from "../src/index";

const URL = process.env.ASYNQPY_TEST_REDIS_URL;
const KEY = process.env.ASYNQPY_TEST_SIGNING_KEY;
const Q = "node";            // served by a worker without a key
const SIGNED = "node-signed"; // served by a worker with the key
const PRIO = "node-prio";     // served by a worker of concurrency 1
const IDLE = "node-idle";     // served by no worker
const WAIT = { queue: Q, timeout: 20 };

describe("the Node client against a real Redis and Python workers", { skip: URL === undefined ? "ASYNQPY_TEST_REDIS_URL not set" : false }, () => {
  let redis: Redis;
  let client: Client;

  before(() => {
    redis = new Redis(URL as string);
    client = new Client(redis, { recheck: 0.5 });
  });
  after(async () => {
    await client.close();
    redis.disconnect();
  });

  test("enqueue now: a Python worker runs it, its result read back", async () => {
    const info = await client.enqueue("add", { a: 2, b: 40 }, { queue: Q, retention: 60 });
    assert.equal(info.state, "pending");
    assert.match(info.id, /^[A-Za-z0-9_][A-Za-z0-9_-]{15}$/);
    assert.equal(await client.result(info.id, WAIT), 42);
    assert.equal((await client.getTask(info.id, Q))?.state, "completed");
    assert.equal((await client.getTask(info.id, Q))?.message?.result, 42);
  });

  test("call: enqueue and wait on the task's own inbox (its reply_to), kept or not", async () => {
    assert.equal(await client.call("add", { a: 1, b: 2 }, WAIT), 3);
    await assert.rejects(client.call("fail", "no", { ...WAIT, maxRetry: 0 }), TaskFailedError);
  });

  test("waits in parallel do not queue behind each other", async () => {
    const t0 = Date.now();
    const got = await Promise.all([1, 2, 3, 4].map((n) => client.call("slow", n, WAIT)));
    assert.deepEqual(got, [1, 2, 3, 4]);
    assert.ok(Date.now() - t0 < 4000, `${Date.now() - t0} ms for four 0.3 s tasks on four workers`);
  });

  test("payloads of every msgpack kind round-trip through a Python handler", async () => {
    const payload = { s: "héllo", n: -7, big: 1700000000000, f: 1.5, t: true, z: null, l: [1, "x"], b: Buffer.from([0, 255]) };
    const got = (await client.call("echo", payload, WAIT)) as Record<string, unknown>;
    assert.deepEqual({ ...got, b: Buffer.from(got.b as Uint8Array) }, payload);
  });

  test("a failed task: TaskFailedError with its last error", async () => {
    const info = await client.enqueue("fail", "boom", { queue: Q, maxRetry: 0 });
    await assert.rejects(client.result(info.id, WAIT), (e: unknown) =>
      e instanceof TaskFailedError && e.error.includes("boom") && e.id === info.id);
  });

  test("getTask reads a task's state and message; an unknown id is null", async () => {
    const info = await client.enqueue("add", { a: 1, b: 1 }, { queue: IDLE, taskId: `get-${Date.now()}`, priority: 7, tenant: "acme", retention: 60, headers: { h: "v" } });
    const got = await client.getTask(info.id, IDLE);
    assert.equal(got?.state, "pending");
    assert.equal(got?.type, "add");
    assert.deepEqual(got?.payload, { a: 1, b: 1 });
    assert.equal(got?.message?.priority, 7);
    assert.equal(got?.message?.tenant, "acme");
    assert.equal(got?.message?.retention_ms, 60000);
    assert.deepEqual(got?.message?.headers, { h: "v" });
    assert.equal(await client.getTask("no-such-task", IDLE), null);
  });

  test("taskId: a live task with the id is a conflict", async () => {
    const id = `mine-${Date.now()}`;
    await client.enqueue("add", { a: 1, b: 2 }, { queue: IDLE, taskId: id });
    await assert.rejects(client.enqueue("add", { a: 1, b: 3 }, { queue: IDLE, taskId: id }), TaskIdConflictError);
  });

  test("processIn and processAt: scheduled on the Redis clock, run when due", async () => {
    const t0 = Date.now();
    const a = await client.enqueue("add", { a: 1, b: 2 }, { queue: Q, processIn: 0.5, retention: 60 });
    const b = await client.enqueue("add", { a: 3, b: 4 }, { queue: Q, processAt: new Date(Date.now() + 500), retention: 60 });
    assert.equal(a.state, "scheduled");
    assert.equal(b.state, "scheduled");
    assert.ok(a.due !== undefined && a.due >= t0 + 400, `due ${a.due} vs now ${t0}`);
    assert.equal((await client.getTask(a.id, Q))?.state, "scheduled");
    assert.equal(await client.result(a.id, WAIT), 3);
    assert.equal(await client.result(b.id, WAIT), 7);
    assert.ok(Date.now() - t0 >= 450);
  });

  test("unique: a second task with the same type and payload is refused while the first lives", async () => {
    const first = await client.enqueue("add", { a: 9, b: 9 }, { queue: IDLE, unique: 60 });
    await assert.rejects(client.enqueue("add", { b: 9, a: 9 }, { queue: IDLE, unique: 60 }), (e: unknown) =>
      e instanceof DuplicateTaskError && e.holder === first.id && e.secondsLeft > 50);
    await client.enqueue("add", { a: 9, b: 9 }, { queue: IDLE, unique: 60, tenant: "other" });  // another tenant's
  });

  test("unique across languages: the locks of tasks the Python client made hold against Node's", async () => {
    const py = JSON.parse(process.env.ASYNQPY_TEST_PY_UNIQUE ?? "{}") as Record<string, string>;
    assert.ok(py.plain && py.keyed && py.tenant, "the Python side's unique tasks (ASYNQPY_TEST_PY_UNIQUE)");
    const holder = (id: string) => (e: unknown) => e instanceof DuplicateTaskError && e.holder === id;
    await assert.rejects(client.enqueue("py:unique", { n: 1, m: [1, 2] }, { queue: IDLE, unique: 60 }), holder(py.plain));
    await assert.rejects(client.enqueue("other", null, { queue: IDLE, uniqueKey: "order:42" }), holder(py.keyed));
    await assert.rejects(client.enqueue("py:unique", { n: 1 }, { queue: IDLE, unique: 60, tenant: "acme" }), holder(py.tenant));
  });

  test("priority: a priority 9 task runs before the priority 1 tasks queued before it", async () => {
    await client.run("pause", PRIO, { now: "" });
    const low = await client.enqueue("order", null, { queue: PRIO, priority: 1, retention: 60 });
    const low2 = await client.enqueue("order", null, { queue: PRIO, retention: 60 });
    const high = await client.enqueue("order", null, { queue: PRIO, priority: 9, retention: 60 });
    assert.notEqual(await redis.zscore(queueKey(PRIO, "prio"), high.id), null);
    await client.run("unpause", PRIO, {});
    const w = { queue: PRIO, timeout: 20 };
    const [l, l2, h] = [await client.result(low.id, w), await client.result(low2.id, w), await client.result(high.id, w)];
    assert.ok((h as number) < (l2 as number) && (l2 as number) < (l as number), `started: high ${h}, default ${l2}, low ${l}`);
  });

  test("tenant and priority reach the Python handler", async () => {
    assert.deepEqual(await client.call("info", null, { ...WAIT, tenant: "acme", priority: 8 }), { tenant: "acme", priority: 8, key: "", parents: [] });
  });

  test("key: tasks with one key run one at a time, in order (the second waits blocked)", async () => {
    const a = await client.enqueue("slow", 1, { queue: Q, key: "cust-1", retention: 60 });
    const b = await client.enqueue("info", null, { queue: Q, key: "cust-1", retention: 60 });
    assert.equal(a.state, "pending");
    assert.equal(b.state, "blocked");
    assert.equal(await client.result(a.id, WAIT), 1);
    assert.deepEqual(await client.result(b.id, WAIT), { tenant: "", priority: 5, key: "cust-1", parents: [] });
  });

  test("after: a child waits for its parents (in two queues) and reads their results", async () => {
    await client.run("pause", PRIO, { now: "" });
    const p1 = await client.enqueue("order", null, { queue: PRIO, retention: 60 });
    const p2 = await client.enqueue("add", { a: 1, b: 1 }, { queue: Q, retention: 60 });
    const child = await client.enqueue("info", null, { queue: Q, after: [[PRIO, p1.id], p2], retention: 60 });
    assert.equal(child.state, "waiting");
    assert.equal((await client.getTask(child.id, Q))?.state, "waiting");
    assert.deepEqual((await client.getTask(child.id, Q))?.message?.after, [[PRIO, p1.id], [Q, p2.id]]);
    await client.run("unpause", PRIO, {});
    const first = await client.result(p1.id, { queue: PRIO, timeout: 20 });
    assert.deepEqual(await client.result(child.id, WAIT), { tenant: "", priority: 5, key: "", parents: [first, 2] });
  });

  test("after: a parent that completed already is resolved at once", async () => {
    const p = await client.enqueue("add", { a: 20, b: 22 }, { queue: Q, retention: 60 });
    assert.equal(await client.result(p.id, WAIT), 42);
    const child = await client.enqueue("info", null, { queue: Q, after: p.id, retention: 60 });
    assert.equal(child.state, "pending");
    assert.deepEqual(await client.result(child.id, WAIT), { tenant: "", priority: 5, key: "", parents: [42] });
    assert.deepEqual(await client.call("info", null, { ...WAIT, after: p.id }), { tenant: "", priority: 5, key: "", parents: [42] });
  });

  test("after: a failed parent cancels the child (the default policy); a missing parent is refused", async () => {
    const p = await client.enqueue("fail", "parent broke", { queue: Q, maxRetry: 0 });
    const child = await client.enqueue("info", null, { queue: Q, after: [p] });
    await assert.rejects(client.result(p.id, WAIT), TaskFailedError);
    await assert.rejects(client.result(child.id, WAIT), (e: unknown) =>
      e instanceof TaskFailedError && e.error.includes("cancelled"));
    await assert.rejects(client.enqueue("info", null, { queue: Q, after: "no-such-parent" }), TaskNotFoundError);
  });

  test("waiting: an unknown task is not found; a task nobody runs times out", async () => {
    await assert.rejects(client.result("never-enqueued", { queue: Q, timeout: 5 }), TaskNotFoundError);
    const idle = await client.enqueue("add", { a: 1, b: 1 }, { queue: IDLE });
    await assert.rejects(client.result(idle.id, { queue: IDLE, timeout: 0.3 }), WaitTimeoutError);
  });

  test("a task with every option, left for the Python side to compare (tests/test_node_client.py)", async () => {
    const info = await client.enqueue("every", { x: [1, "y"], b: Buffer.from([1]) }, {
      queue: IDLE, taskId: "node-every", unique: 30, priority: 2, tenant: "acme", maxRetry: 3, timeout: 60,
      retention: 120, retryDelay: 5, deadline: 2e12, headers: { h: "v" }, retryFront: true, processIn: 3600,
    });
    assert.equal(info.state, "scheduled");
  });

  test("bad input is refused before anything is sent", async () => {
    await assert.rejects(client.enqueue("", null), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { queue: "bad{queue}" }), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { priority: 10 }), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { key: "k", unique: 10 }), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { processIn: 1, processAt: Date.now() }), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { tenant: "" }), InvalidArgumentError);
    await assert.rejects(client.enqueue("t", null, { bogus: 1 } as never), InvalidArgumentError);
  });

  test("signing: a worker with the key runs a task signed by Node, and archives an unsigned one", { skip: KEY === undefined }, async () => {
    const signer = new Client(redis, { signingKey: Buffer.from(KEY as string) });
    try {
      assert.equal(await signer.call("add", { a: 5, b: 5 }, { queue: SIGNED, timeout: 20 }), 10);
    } finally {
      await signer.close();
    }
    const unsigned = await client.enqueue("add", { a: 5, b: 5 }, { queue: SIGNED });
    await assert.rejects(client.result(unsigned.id, { queue: SIGNED, timeout: 20 }), (e: unknown) =>
      e instanceof TaskFailedError && e.error.includes("bad signature"));
    assert.throws(() => new Client(redis, { signingKey: Buffer.from("short") }), InvalidArgumentError);
  });
});

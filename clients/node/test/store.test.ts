/**
 * What needs a Redis but no worker: the script calls of tests/vectors/replies.json replayed (the
 * replies compared, the messages in them decoded) and the protocol version check. Each on its own
 * database of ASYNQPY_TEST_REDIS_URL's server (14, 15), flushed first; skipped without it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import Redis from "ioredis";

import * as codec from "../src/codec";
import { ALL_QUEUES, Client, PROTOCOL_KEY, ProtocolVersionError, queueKey } from "../src/index";
import { loadScript, luaDir } from "../src/scripts";
import { argOf, replyJson, vectors } from "./helpers";

const URL = process.env.ASYNQPY_TEST_REDIS_URL;
const skip = URL === undefined ? "ASYNQPY_TEST_REDIS_URL not set" : false;
/** ASYNQPY_TEST_REDIS_URL's server, database `db` (the URL's own database is the workers'). */
const onDb = (db: number): Redis => new Redis(`${(URL as string).replace(/\/\d*$/, "")}/${db}`);

describe("tests/vectors/replies.json replayed", { skip }, () => {
  let redis: Redis;
  before(async () => {
    redis = onDb(14);
    await redis.flushdb();
  });
  after(async () => {
    await redis.flushdb();
    redis.disconnect();
  });

  test("each call gives the recorded reply; the messages in replies decode", async () => {
    const { calls } = vectors("replies.json");
    for (const c of calls) {
      const s = loadScript(luaDir(), c.script);
      const argv = [...c.keys, ...c.args.map(argOf)];
      let reply: unknown;
      try {
        reply = await redis.callBuffer("EVALSHA", s.sha, c.keys.length, ...argv);
      } catch {
        reply = await redis.callBuffer("EVAL", s.source, c.keys.length, ...argv);
      }
      assert.deepEqual(replyJson(reply), c.reply, `${c.script}: ${c.what}`);
      for (const v of c.args.concat(Array.isArray(c.reply) ? c.reply : [])) {
        if (v !== null && typeof v === "object" && "hex" in v && /^(9|dc)/.test(v.hex)) {
          assert.equal(codec.decode(Buffer.from(v.hex, "hex")).type.length > 0, true);
        }
      }
    }
  });
});

describe("the protocol version", { skip }, () => {
  let redis: Redis;
  before(async () => {
    redis = onDb(15);
    await redis.flushdb();
  });
  after(async () => {
    await redis.flushdb();
    redis.disconnect();
  });

  test("a reader leaves an absent key absent; the first writer stamps 1", async () => {
    await redis.del(PROTOCOL_KEY);
    const reader = new Client(redis);
    assert.equal(await reader.getTask("x", "q"), null);
    assert.equal(await redis.get(PROTOCOL_KEY), null);
    await new Client(redis).enqueue("t", null, { queue: "q" });
    assert.equal(await redis.get(PROTOCOL_KEY), "1");
  });

  for (const [stored, what, version] of [["2", "newer than", 2], ["0", "not a protocol version", null], ["garbage", "not a protocol version", null]] as const) {
    test(`a store of protocol ${JSON.stringify(stored)} is refused (${what}) and nothing is written`, async () => {
      await redis.flushdb();
      await redis.set(PROTOCOL_KEY, stored);
      const client = new Client(redis);
      await assert.rejects(client.enqueue("t", null, { queue: "q" }), (e: unknown) =>
        e instanceof ProtocolVersionError && e.message.includes(what) && e.message.includes("nothing was written") &&
        e.stored === version);
      await assert.rejects(client.getTask("x", "q"), ProtocolVersionError);
      await assert.rejects(client.result("x", { queue: "q" }), ProtocolVersionError);
      assert.deepEqual(await redis.keys("*"), [PROTOCOL_KEY]);
      assert.equal(await redis.exists(queueKey("q", "tasks"), ALL_QUEUES), 0);
    });
  }

  test("the refusal names what to do", async () => {
    await redis.set(PROTOCOL_KEY, "2");
    await assert.rejects(new Client(redis).enqueue("t"), /this Redis holds asynqpy protocol 2, newer than asynqpy-client \(Node\) 0\.1\.0 understands \(protocol 1\): upgrade asynqpy-client here/);
  });
});

import assert from "node:assert/strict";
import { test } from "node:test";

import * as codec from "../src/codec";
import { fromJson, toJson, vectors } from "./helpers";

const M = vectors("messages.json");

test("the field table is the vectors' (names and order)", () => {
  assert.deepEqual(codec.FIELDS.map((f) => f.name), M.fields);
});

test("messages encode byte-identically and decode to their fields", () => {
  for (const v of M.messages) {
    const msg = fromJson(v.fields) as codec.Message;
    assert.equal(codec.encode(msg).toString("hex"), v.hex, `${v.name}: ${v.what}`);
    const got = codec.decode(Buffer.from(v.hex, "hex")) as unknown as Record<string, unknown>;
    for (const [name, value] of Object.entries(v.fields)) {
      assert.deepEqual(toJson(got[name]), value, `${v.name}.${name}`);
    }
  }
});

test("signed messages: the tag is HMAC-SHA256 over asynqpy1: + netstrings of queue and id + message", () => {
  for (const v of M.signed) {
    const sealed = codec.seal(Buffer.from(v.key_hex, "hex"), v.queue, v.id, Buffer.from(v.message_hex, "hex"));
    assert.equal(sealed.toString("hex"), v.hex, v.name);
    assert.equal(Buffer.from(codec.untagged(sealed)).toString("hex"), v.message_hex);
    assert.equal(codec.decode(sealed).type, codec.decode(Buffer.from(v.message_hex, "hex")).type);
  }
});

test("stored values: state code, lease token, message", () => {
  for (const v of M.stored) {
    const raw = Buffer.from(v.hex, "hex");
    const code = String.fromCharCode(raw[0]);
    const body = code === "a" ? raw.subarray(9) : raw.subarray(1);
    assert.equal(body.toString("hex"), v.message_hex);
    assert.equal({ p: "pending", a: "active" }[code], v.state);
    if (v.token) {
      assert.equal(raw.subarray(1, 9).toString(), v.token);
    }
  }
});

test("malformed messages are refused", () => {
  for (const v of M.malformed) {
    assert.throws(() => codec.decode(Buffer.from(v.hex, "hex")), codec.MalformedMessageError, v.why);
  }
});

test("a field's raw bytes are found without decoding (a parent's result, for after=)", () => {
  const every = M.messages.find((m: { name: string }) => m.name === "every_field");
  const data = Buffer.from(every.hex, "hex");
  const raw = codec.rawField(data, codec.FIELD_INDEX.payload) as Uint8Array;
  assert.deepEqual(toJson(codec.unpack(raw)), every.fields.payload);
  assert.equal(codec.rawField(Buffer.from(M.messages[0].hex, "hex"), codec.FIELD_INDEX.result), undefined);
});

test("the uniqueness digest does not depend on a map's order", () => {
  const a = codec.uniqueDigest("t", { x: 1, y: [1, { b: 2, a: 1 }] });
  const b = codec.uniqueDigest("t", { y: [1, { a: 1, b: 2 }], x: 1 });
  assert.equal(a, b);
  assert.notEqual(a, codec.uniqueDigest("t2", { x: 1, y: [1, { b: 2, a: 1 }] }));
});

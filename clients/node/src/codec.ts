/**
 * The task message (docs/protocol.md "The task message", docs/protocol-reference.md's field
 * table): a msgpack array of fields in a fixed order, trailing defaults left out; a signed message
 * is followed by its tag (a msgpack bin of 32 bytes, HMAC-SHA256).
 */
import { createHash, createHmac } from "node:crypto";

import { Decoder, Encoder } from "@msgpack/msgpack";

/** One message field: its name, its default and the msgpack types it may hold. */
interface Field {
  name: string;
  dflt: unknown;
  type: "str" | "int" | "bool" | "any" | "map" | "array";
}

/** The fields, in order (docs/protocol-reference.md "The task message"). */
export const FIELDS: readonly Field[] = [
  { name: "type", dflt: undefined, type: "str" },
  { name: "payload", dflt: null, type: "any" },
  { name: "enqueued_at_ms", dflt: 0, type: "int" },
  { name: "max_retry", dflt: 25, type: "int" },
  { name: "timeout_ms", dflt: -1, type: "int" },
  { name: "deadline_ms", dflt: 0, type: "int" },
  { name: "retention_ms", dflt: 0, type: "int" },
  { name: "unique", dflt: false, type: "bool" },
  { name: "retried", dflt: 0, type: "int" },
  { name: "last_error", dflt: "", type: "str" },
  { name: "last_failed_at_ms", dflt: 0, type: "int" },
  { name: "retry_delay_ms", dflt: -1, type: "int" },
  { name: "completed_at_ms", dflt: 0, type: "int" },
  { name: "result", dflt: null, type: "any" },
  { name: "traceback", dflt: "", type: "str" },
  { name: "headers", dflt: null, type: "map" },
  { name: "reply_to", dflt: "", type: "str" },
  { name: "group", dflt: "", type: "str" },
  { name: "unique_key", dflt: "", type: "str" },
  { name: "priority", dflt: 5, type: "int" },
  { name: "workers", dflt: null, type: "array" },
  { name: "runs", dflt: 1, type: "int" },
  { name: "after", dflt: null, type: "array" },
  { name: "key", dflt: "", type: "str" },
  { name: "retry_front", dflt: false, type: "bool" },
  { name: "tenant", dflt: "", type: "str" },
  { name: "logs", dflt: null, type: "array" },
  { name: "min_version", dflt: 0, type: "int" },
];

/** Each field's 0-based index (what a script reads as `F.<field>`). */
export const FIELD_INDEX: Record<string, number> = Object.fromEntries(FIELDS.map((f, i) => [f.name, i]));

/** A message's fields by name (only `type` is required; the others default). */
export interface Message {
  type: string;
  payload?: unknown;
  enqueued_at_ms?: number;
  max_retry?: number;
  timeout_ms?: number;
  deadline_ms?: number;
  retention_ms?: number;
  unique?: boolean;
  retried?: number;
  last_error?: string;
  last_failed_at_ms?: number;
  retry_delay_ms?: number;
  completed_at_ms?: number;
  result?: unknown;
  traceback?: string;
  headers?: Record<string, string> | null;
  reply_to?: string;
  group?: string;
  unique_key?: string;
  priority?: number;
  workers?: string[] | null;
  runs?: number;
  after?: [string, string][] | null;
  key?: string;
  retry_front?: boolean;
  tenant?: string;
  logs?: unknown[] | null;
  min_version?: number;
}

/** A message that is not one (wrong shape, wrong type of a field, trailing garbage). */
export class MalformedMessageError extends Error {
  override name = "MalformedMessageError";
}

const encoder = new Encoder({ ignoreUndefined: false });
const decoder = new Decoder();

/** msgpack of any value, as the Python side packs it (str as str, Buffer/Uint8Array as bin). */
export function pack(value: unknown): Buffer {
  const out = encoder.encode(value);
  return Buffer.from(out.buffer, out.byteOffset, out.byteLength);
}

/** The value of msgpack bytes (bin as Uint8Array). */
export function unpack(data: Uint8Array): unknown {
  return decoder.decode(data);
}

/** The message's field values in order, trailing defaults left out (at least `type`). */
export function values(msg: Message): unknown[] {
  const rec = msg as unknown as Record<string, unknown>;
  const vals = FIELDS.map((f) => (rec[f.name] === undefined ? f.dflt : rec[f.name]));
  let end = vals.length;
  while (end > 1 && vals[end - 1] === FIELDS[end - 1].dflt) {
    end -= 1;
  }
  return vals.slice(0, end);
}

/** Encodes a message (docs/protocol.md "The task message"). */
export function encode(msg: Message): Buffer {
  if (typeof msg.type !== "string" || msg.type === "") {
    throw new TypeError("a message's type is a non-empty string");
  }
  return pack(values(msg));
}

/** The number of bytes a msgpack value starting at `pos` takes (its end), without decoding it. */
export function skip(data: Uint8Array, pos: number): number {
  const b = data[pos];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const items = (n: number, at: number): number => {
    let p = at;
    for (let i = 0; i < n; i++) {
      p = skip(data, p);
    }
    return p;
  };
  if (b === undefined) {
    throw new MalformedMessageError("truncated msgpack");
  }
  if (b <= 0x7f || b >= 0xe0 || b === 0xc0 || b === 0xc2 || b === 0xc3) return pos + 1;
  if (b >= 0x80 && b <= 0x8f) return items(2 * (b & 0x0f), pos + 1);
  if (b >= 0x90 && b <= 0x9f) return items(b & 0x0f, pos + 1);
  if (b >= 0xa0 && b <= 0xbf) return pos + 1 + (b & 0x1f);
  switch (b) {
    case 0xc4: case 0xd9: return pos + 2 + data[pos + 1];
    case 0xc5: case 0xda: return pos + 3 + view.getUint16(pos + 1);
    case 0xc6: case 0xdb: return pos + 5 + view.getUint32(pos + 1);
    case 0xcc: case 0xd0: return pos + 2;
    case 0xcd: case 0xd1: return pos + 3;
    case 0xce: case 0xd2: case 0xca: return pos + 5;
    case 0xcf: case 0xd3: case 0xcb: return pos + 9;
    case 0xd4: return pos + 3;
    case 0xd5: return pos + 4;
    case 0xd6: return pos + 6;
    case 0xd7: return pos + 10;
    case 0xd8: return pos + 18;
    case 0xc7: return pos + 3 + data[pos + 1];
    case 0xc8: return pos + 4 + view.getUint16(pos + 1);
    case 0xc9: return pos + 6 + view.getUint32(pos + 1);
    case 0xdc: return items(view.getUint16(pos + 1), pos + 3);
    case 0xdd: return items(view.getUint32(pos + 1), pos + 5);
    case 0xde: return items(2 * view.getUint16(pos + 1), pos + 3);
    case 0xdf: return items(2 * view.getUint32(pos + 1), pos + 5);
    default: throw new MalformedMessageError(`not msgpack (byte 0x${b.toString(16)})`);
  }
}

/** The message bytes of a stored message: without its signing tag, if it has one. */
export function untagged(data: Uint8Array): Uint8Array {
  let end: number;
  try {
    end = skip(data, 0);
  } catch (e) {
    throw new MalformedMessageError(`undecodable message: ${(e as Error).message}`);
  }
  if (end === data.length) {
    return data;
  }
  if (end > data.length || data.length - end !== 34 || data[end] !== 0xc4 || data[end + 1] !== 0x20) {
    throw new MalformedMessageError("undecodable message: unexpected bytes after the message");
  }
  return data.subarray(0, end);
}

/** The raw msgpack bytes of field `index` of an encoded message (undefined: left out, a default). */
export function rawField(data: Uint8Array, index: number): Uint8Array | undefined {
  const b = data[0];
  let n: number;
  let pos: number;
  if (b >= 0x90 && b <= 0x9f) {
    [n, pos] = [b & 0x0f, 1];
  } else if (b === 0xdc) {
    [n, pos] = [(data[1] << 8) | data[2], 3];
  } else {
    throw new MalformedMessageError("message is not an array");
  }
  if (index >= n) {
    return undefined;
  }
  for (let i = 0; i < index; i++) {
    pos = skip(data, pos);
  }
  return data.subarray(pos, skip(data, pos));
}

function typeOk(type: Field["type"], v: unknown): boolean {
  switch (type) {
    case "str": return typeof v === "string";
    case "int": return typeof v === "number" ? Number.isInteger(v) : typeof v === "bigint";
    case "bool": return typeof v === "boolean";
    case "map": return v === null || (typeof v === "object" && !Array.isArray(v) && !(v instanceof Uint8Array));
    case "array": return v === null || Array.isArray(v);
    default: return true;
  }
}

/** Decodes a stored message (a trailing signing tag accepted, not checked), every field typed. */
export function decode(data: Uint8Array): Required<Message> {
  const body = untagged(data);
  let vals: unknown;
  try {
    vals = unpack(body);
  } catch (e) {
    throw new MalformedMessageError(`undecodable message: ${(e as Error).message}`);
  }
  if (!Array.isArray(vals) || vals.length < 1 || vals.length > FIELDS.length) {
    throw new MalformedMessageError("message is not an array of the expected length");
  }
  const out: Record<string, unknown> = {};
  FIELDS.forEach((f, i) => {
    const v = i < vals.length ? vals[i] : f.dflt;
    if (i < vals.length && !typeOk(f.type, v)) {
      throw new MalformedMessageError(`message field '${f.name}' has a wrong type`);
    }
    out[f.name] = v;
  });
  if (out.type === "") {
    throw new MalformedMessageError("message has an empty task type");
  }
  return out as unknown as Required<Message>;
}

function netstring(b: Buffer): Buffer {
  return Buffer.concat([Buffer.from(`${b.length}:`), b, Buffer.from(",")]);
}

/** The signing tag of `data` stored as task `id` of `queue` (docs/protocol.md, docs/security.md). */
export function tag(key: Uint8Array, queue: string, id: string, data: Uint8Array): Buffer {
  return createHmac("sha256", key)
    .update(Buffer.concat([Buffer.from("asynqpy1:"), netstring(Buffer.from(queue, "utf8")),
      netstring(Buffer.from(id, "utf8")), data]))
    .digest();
}

/** `data` followed by its tag: a msgpack bin of 32 bytes. */
export function seal(key: Uint8Array, queue: string, id: string, data: Uint8Array): Buffer {
  return Buffer.concat([data, Buffer.from([0xc4, 0x20]), tag(key, queue, id, data)]);
}

function sha1hex(data: Uint8Array | string): string {
  return createHash("sha1").update(data).digest("hex");
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) {
    return value.map(canonical);
  }
  if (value instanceof Map) {
    return sortItems([...value.entries()]);
  }
  if (value !== null && typeof value === "object" && !(value instanceof Uint8Array)) {
    return sortItems(Object.entries(value as Record<string, unknown>));
  }
  return value;
}

function sortItems(entries: [unknown, unknown][]): unknown[] {
  const items = entries.map(([k, v]) => [pack(k), canonical(v)] as [Buffer, unknown]);
  items.sort((a, b) => Buffer.compare(a[0], b[0]));
  return items;
}

/** SHA-1 over the type and a canonical encoding of the payload (a map's order does not matter). */
export function uniqueDigest(type: string, payload: unknown): string {
  return sha1hex(Buffer.concat([Buffer.from(type, "utf8"), Buffer.from([0]), pack(canonical(payload))]));
}

/** The digest naming a unique task's lock (`lock()` of the reference): its key's, else its
 * type and payload's, with its tenant when it has one. */
export function lockDigest(msg: Message): string {
  if (msg.unique_key) {
    return sha1hex(Buffer.concat([Buffer.from("key\0"), Buffer.from(msg.unique_key, "utf8")]));
  }
  const digest = uniqueDigest(msg.type, msg.payload ?? null);
  return msg.tenant ? sha1hex(`tenant\0${msg.tenant}\0${digest}`) : digest;
}

import { readFileSync } from "node:fs";
import { join } from "node:path";

import { luaDir } from "../src/scripts";

/** tests/vectors/ of the repository this package is in. */
export const VECTORS = join(luaDir(), "..", "tests", "vectors");

export function vectors(name: string): any {  // eslint-disable-line @typescript-eslint/no-explicit-any
  return JSON.parse(readFileSync(join(VECTORS, name), "utf8"));
}

/** A vector's JSON value as the codec's value: {"bin": hex} -> Buffer, {"map": [[k, v]...]} -> Map. */
export function fromJson(v: unknown): unknown {
  if (Array.isArray(v)) {
    return v.map(fromJson);
  }
  if (v !== null && typeof v === "object") {
    const o = v as Record<string, unknown>;
    const keys = Object.keys(o);
    if (keys.length === 1 && keys[0] === "bin" && typeof o.bin === "string") {
      return Buffer.from(o.bin, "hex");
    }
    if (keys.length === 1 && keys[0] === "map" && Array.isArray(o.map)) {
      return new Map((o.map as unknown[][]).map(([k, x]) => [fromJson(k), fromJson(x)]));
    }
    return Object.fromEntries(keys.map((k) => [k, fromJson(o[k])]));
  }
  return v;
}

/** A decoded value as a vector's JSON: bytes -> {"bin": hex}. */
export function toJson(v: unknown): unknown {
  if (v instanceof Uint8Array) {
    return { bin: Buffer.from(v).toString("hex") };
  }
  if (Array.isArray(v)) {
    return v.map(toJson);
  }
  if (v instanceof Map) {
    return { map: [...v.entries()].map(([k, x]) => [toJson(k), toJson(x)]) };
  }
  if (v !== null && typeof v === "object") {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toJson(x)]));
  }
  return v;
}

/** A Redis reply as the vectors write it: bytes as text when UTF-8, else {"hex": ...}. */
export function replyJson(v: unknown): unknown {
  if (Buffer.isBuffer(v)) {
    const text = v.toString("utf8");
    return Buffer.from(text, "utf8").equals(v) ? text : { hex: v.toString("hex") };
  }
  if (Array.isArray(v)) {
    return v.map(replyJson);
  }
  return v;
}

/** A vector's script argument: {"hex": ...} -> Buffer. */
export function argOf(v: unknown): string | Buffer {
  if (v !== null && typeof v === "object" && "hex" in (v as object)) {
    return Buffer.from((v as { hex: string }).hex, "hex");
  }
  return String(v);
}

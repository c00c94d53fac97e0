/**
 * The loader of asynqpy's `lua/` scripts, written from docs/protocol.md ("Loading a script"):
 * the `--- @include` lines inlined, unused local functions left out, and the prologue binding
 * the header's names (`K`, `A`, `G`, `F`) put after the header. Its output is byte-identical to
 * the Python loader's: the SHA-1 of every flattened script is in tests/vectors/scripts.json.
 */
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";

import { FIELD_INDEX } from "./codec";

/** The key groups a header names as `KEY @name` (docs/protocol.md), expanded in place. */
export const KEY_GROUPS: Record<string, string[]> = {
  pending: ["pending", "prio", "tq", "tr", "tn", "ta"],
  events: ["events", "conf"],
  serial: ["keyheld", "blocked", "wake", "@pending"],
  exit: ["@events", "children", "outbox", "@serial", "blobs"],
};

/** The keys of group `name`, nested groups expanded, in order. */
export function groupKeys(name: string): string[] {
  const members = KEY_GROUPS[name];
  if (members === undefined) {
    throw new Error(`no key group @${name}`);
  }
  return members.flatMap((m) => (m.startsWith("@") ? groupKeys(m.slice(1)) : [m]));
}

/** One script, loaded: its inputs by name and its flattened source with its SHA-1. */
export interface Script {
  name: string;
  keys: string[];
  args: string[];
  keysTail: string;
  argsTail: string;
  keysStride: string[];
  argsStride: string[];
  source: string;
  sha: string;
}

interface Header {
  keys: string[];
  args: string[];
  tails: { KEY: string; ARG: string };
  strides: { KEY: string[]; ARG: string[] };
}

const INCLUDE = /^--- @include "([a-z_]+)"\s*$/gm;
const DOC_LINE = /^\s*--(?!- @include ).*\n/gm;
const HEADER = /^--\[\[([\s\S]*?)\]\]/;
const DECL_START = /^(KEYS?|ARGV?)\b/;
const DECL = /^(KEY|ARG) (@?[A-Za-z_]\w*)(\.\.\.)?(?: \{([^}]*)\})?(?:\s{2,}\S.*)?\s*$/;
const COMMENT = /--\[(=*)\[[\s\S]*?\]\1\]|--[^\n]*/g;
const LOCAL_FUNCTION = /^local function ([A-Za-z_]\w*)\([\s\S]*?^end[ \t]*(?:--[^\n]*)?\n/gm;
const WORD = /[A-Za-z_]\w*/g;
const FIELD = /(?<![\w.])F\.([A-Za-z_]\w*)/g;
const GROUP = /(?<![\w.])G\.([A-Za-z_]\w*)/g;

/** The header's declarations read: fixed KEY and ARG names (groups expanded), tails, strides. */
export function parseHeader(filename: string, text: string): Header {
  const h = HEADER.exec(text);
  if (!h) {
    throw new Error(`${filename}: no --[[ ... ]] header at the top`);
  }
  const fixed = { KEY: [] as string[], ARG: [] as string[] };
  const tails = { KEY: "", ARG: "" };
  const strides = { KEY: [] as string[], ARG: [] as string[] };
  const lines = h[1].split("\n");
  for (let i = 0; i < lines.length; i++) {
    let line = lines[i];
    if (!DECL_START.test(line)) {
      continue;
    }
    while (line.includes("{") && !line.includes("}")) {
      i += 1;
      line = line.trimEnd() + " " + (i < lines.length ? lines[i].trim() : "}");
    }
    const d = DECL.exec(line);
    if (!d) {
      throw new Error(`${filename}: not a declaration: ${JSON.stringify(line.trim())}`);
    }
    const kind = d[1] as "KEY" | "ARG";
    const name = d[2];
    if (d[3]) {
      tails[kind] = name;
      if (d[4] !== undefined) {
        strides[kind] = d[4].trim() === "*" ? [...fixed[kind]] : d[4].split(/\s+/).filter((s) => s);
      }
    } else {
      fixed[kind].push(...(name.startsWith("@") ? groupKeys(name.slice(1)) : [name]));
    }
  }
  return { keys: fixed.KEY, args: fixed.ARG, tails, strides };
}

function flatten(text: string, includes: string, seen: Set<string>): string {
  return text.replace(INCLUDE, (_m, name: string) => {
    if (seen.has(name)) {
      return "";
    }
    seen.add(name);
    return flatten(readFileSync(join(includes, `${name}.lua`), "utf8").replace(DOC_LINE, ""), includes, seen);
  });
}

/** `code` without its top-level local functions that nothing reaches (docs/protocol.md). */
export function shake(code: string): string {
  const blocks = [...code.matchAll(LOCAL_FUNCTION)];
  if (blocks.length === 0) {
    return code;
  }
  const defined = new Set(blocks.map((m) => m[1]));
  const words = (s: string): Set<string> => new Set([...s.matchAll(WORD)].map((w) => w[0]).filter((w) => defined.has(w)));
  let outside = "";
  let pos = 0;
  for (const m of blocks) {
    outside += code.slice(pos, m.index);
    pos = (m.index as number) + m[0].length;
  }
  outside += code.slice(pos);
  const uses = blocks.map((m) => words(m[0].slice(m[1].length + 15)));
  const todo = words(outside);
  const reached = new Set<string>();
  while (todo.size > 0) {
    const name = todo.values().next().value as string;
    todo.delete(name);
    reached.add(name);
    blocks.forEach((m, i) => {
      if (m[1] === name) {
        for (const u of uses[i]) {
          if (!reached.has(u)) {
            todo.add(u);
          }
        }
      }
    });
  }
  let out = "";
  pos = 0;
  for (const m of blocks) {
    if (!reached.has(m[1])) {
      out += code.slice(pos, m.index);
      pos = (m.index as number) + m[0].length;
    }
  }
  return out + code.slice(pos);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function tailView(target: string, raw: string, o: number, members: string[], first: string, unpack: boolean): string {
  const n = members.length === 0 ? `#${raw} - ${o}` : `(#${raw} - ${o}) / ${members.length}`;
  const fields = `n = ${n}` + (unpack ? `, all = function() return unpack(${raw}, ${o + 1}) end` : "");
  if (members.length === 0) {
    return `${target} = setmetatable({${fields}}, {__index = function(_, i) return ${raw}[${o} + i] end})\n`;
  }
  const w = members.length;
  const off = members.map((m, i) => `${m} = ${i + 1}`).join(", ");
  const zero = first ? `if i == 0 then return ${first} end ` : "";
  return (
    `do\n  local off = {${off}}\n` +
    `  local item = {__index = function(t, f) return ${raw}[t[0] + off[f]] end}\n` +
    `  ${target} = setmetatable({${fields}}, {__index = function(_, i) ${zero}` +
    `return setmetatable({[0] = ${o} + (i - 1) * ${w}}, item) end})\nend\n`
  );
}

/** The prologue put after a script's header, for its header `h` and its code (comments removed). */
export function prologue(h: Header, code: string): string {
  const k = h.keys.map((nm, i) => `${nm} = KEYS[${i + 1}]`).join(", ");
  const a = h.args.map((nm, i) => `${nm} = ARGV[${i + 1}]`).join(", ");
  let out = `local K = {${k}}\nlocal A = {${a}}\n`;
  const kinds: ["KEY" | "ARG", string, string, string[]][] = [
    ["KEY", "K", "KEYS", h.keys],
    ["ARG", "A", "ARGV", h.args],
  ];
  for (const [kind, table, raw, fixed] of kinds) {
    const tail = h.tails[kind];
    const members = h.strides[kind];
    if (tail) {
      const target = `${table}.${tail}`;
      const same = members.length === fixed.length && members.every((m, i) => m === fixed[i]);
      const unpack = new RegExp(`(?<![\\w.])${escapeRegExp(target)}\\.all\\b`).test(code);
      out += tailView(target, raw, fixed.length, members, same ? table : "", unpack);
    }
  }
  const groups = [...new Set([...code.matchAll(GROUP)].map((m) => m[1]))].sort();
  if (groups.length > 0) {
    out += "local G = {" + groups.map((g) => `${g} = {` + groupKeys(g).map((x) => `K.${x}`).join(", ") + "}").join(", ") + "}\n";
  }
  const fields = [...new Set([...code.matchAll(FIELD)].map((m) => m[1]))];
  for (const f of fields) {
    if (!(f in FIELD_INDEX)) {
      throw new Error(`a script uses F.${f}, which is no message field`);
    }
  }
  fields.sort((x, y) => FIELD_INDEX[x] - FIELD_INDEX[y]);
  if (fields.length > 0) {
    out += "local F = {" + fields.map((f) => `${f} = ${FIELD_INDEX[f]}`).join(", ") + "}\n";
  }
  return out;
}

/** Loads the script `name` of the directory `root` (includes in `root/includes`). */
export function loadScript(root: string, name: string): Script {
  const filename = `${name}.lua`;
  const text = readFileSync(join(root, filename), "utf8");
  const h = parseHeader(filename, text);
  const flat = flatten(text, join(root, "includes"), new Set());
  const head = HEADER.exec(flat);
  if (!head) {
    throw new Error(`${filename}: no header`);
  }
  const end = head[0].length;
  const body = shake(flat.slice(end));
  const source = flat.slice(0, end) + "\n" + prologue(h, body.replace(COMMENT, "")) + body.replace(/^\n+/, "");
  const sha = createHash("sha1").update(source, "utf8").digest("hex");
  return {
    name, keys: h.keys, args: h.args, keysTail: h.tails.KEY, argsTail: h.tails.ARG,
    keysStride: h.strides.KEY, argsStride: h.strides.ARG, source, sha,
  };
}

/** The repository's `lua/` directory: `ASYNQPY_LUA_DIR`, else the checkout this package sits in. */
export function luaDir(): string {
  const fromEnv = process.env.ASYNQPY_LUA_DIR;
  if (fromEnv) {
    return fromEnv;
  }
  // dist/src/scripts.js -> clients/node -> the repository root
  for (const up of ["../../../../lua", "../../../lua", "../../lua"]) {
    const d = resolve(__dirname, up);
    if (existsSync(join(d, "enqueue.lua"))) {
      return d;
    }
  }
  throw new Error(`asynqpy's lua/ directory not found above ${__dirname}: set ASYNQPY_LUA_DIR`);
}

/** The names of the scripts in `root` (each `<name>.lua`). */
export function scriptNames(root: string): string[] {
  return readdirSync(root).filter((f) => /^[a-z_]+\.lua$/.test(f)).map((f) => f.slice(0, -4)).sort();
}

/**
 * The KEYS and ARGV of a call of `script`, given its inputs by name (a tail as an array):
 * exactly the header's names, in the header's order.
 */
export function bind(script: Script, named: Record<string, unknown>): { keys: unknown[]; args: unknown[] } {
  const want = [...script.keys, ...script.args, ...[script.keysTail, script.argsTail].filter((t) => t)];
  const got = Object.keys(named);
  const missing = want.filter((n) => !(n in named));
  const extra = got.filter((n) => !want.includes(n));
  if (missing.length || extra.length) {
    throw new TypeError(`script ${script.name}: missing [${missing}], unexpected [${extra}]`);
  }
  const keys = script.keys.map((n) => named[n]);
  const args = script.args.map((n) => named[n]);
  if (script.keysTail) {
    keys.push(...(named[script.keysTail] as unknown[]));
  }
  if (script.argsTail) {
    args.push(...(named[script.argsTail] as unknown[]));
  }
  return { keys, args };
}

/**
 * A producer for asynqpy from Node, written from docs/protocol.md: it stores tasks through the
 * same `lua/` scripts as the Python `Client`, reads a task's state and waits for its result.
 */
import { randomBytes } from "node:crypto";

import Redis from "ioredis";

import * as codec from "./codec";
import {
  DuplicateTaskError, InvalidArgumentError, ProtocolVersionError, QueueRefusedError,
  TaskFailedError, TaskIdConflictError, TaskNotFoundError, WaitTimeoutError,
} from "./errors";
import { bind, loadScript, luaDir, Script } from "./scripts";

export const VERSION = "0.1.0";
/** The newest protocol version this client writes and reads (docs/protocol.md). */
export const PROTOCOL_VERSION = 1;
/** The oldest protocol version this client reads. */
export const OLDEST_READ = 1;
/** The global key holding the store's protocol version. */
export const PROTOCOL_KEY = "asynqpy:protocol";
/** The global set of every queue written to. */
export const ALL_QUEUES = "asynqpy:queues";

/** A task's state by its code, the first byte of its stored value. */
export const STATES: Record<string, string> = {
  p: "pending", a: "active", s: "scheduled", r: "retry", x: "archived", c: "completed",
  g: "aggregating", m: "targeted", w: "waiting", b: "blocked",
};
const TOKEN_LEN = 8;
const QUEUE_RE = /^[A-Za-z0-9_.:-]{1,128}$/;
const DEFAULT_UNIQUE_KEY_TTL = 24 * 3600;
const MAX_DELAY_MS = 100 * 365 * 24 * 3600 * 1000;
const SCRIPT_REFUSED = "asynqpy-refused:";

/** A parent of `after`: an id (of a task in the child's queue), a [queue, id] pair or a TaskInfo. */
export type Parent = string | [string, string] | { queue: string; id: string };

/** The options of {@link Client.enqueue}, named as the Python client's (docs/options.md). */
export interface EnqueueOptions {
  queue?: string;
  /** Your own id (else a random one); a live task with it: TaskIdConflictError. */
  taskId?: string;
  /** Run at this time (a Date, or Unix milliseconds). */
  processAt?: Date | number;
  /** Run after this many seconds. */
  processIn?: number;
  /** Seconds (>= 1): refuse another task with the same type + payload (or uniqueKey) while this one lives. */
  unique?: number;
  /** Unique by this key instead of type + payload (for `unique` seconds, else 24 h). */
  uniqueKey?: string;
  /** 0 (lowest) to 9 (highest); 5 by default. */
  priority?: number;
  /** The tenant it belongs to (a queue takes turns across tenants). */
  tenant?: string;
  /** Tasks of a queue with this key run one at a time, in enqueue order. */
  key?: string;
  /** Parents: this task waits until they completed (a workflow). */
  after?: Parent | Parent[];
  /** With `after`: "cancel" (default), "run" or "ignore" when a parent fails. */
  onParentFailure?: "cancel" | "run" | "ignore";
  maxRetry?: number;
  /** Seconds per attempt; null = no limit; undefined = the server's default. */
  timeout?: number | null;
  /** Seconds to keep it as completed, with its result. */
  retention?: number;
  /** Fixed seconds between retries. */
  retryDelay?: number;
  /** Absolute end of every attempt (a Date or Unix milliseconds). */
  deadline?: Date | number;
  headers?: Record<string, string>;
  retryFront?: boolean;
}

/** What the client knows of a task: where it is, its state and its message's fields. */
export interface TaskInfo {
  id: string;
  queue: string;
  state: string;
  type: string;
  payload: unknown;
  /** When it is due (Unix ms), for a task scheduled by this call. */
  due?: number;
  /** The message's fields (docs/protocol-reference.md), for a task read with getTask. */
  message?: Required<codec.Message>;
  /** The lease token of an active task. */
  token?: string;
}

/** The options of a {@link Client}. */
export interface ClientOptions {
  /** Signing key (>= 16 bytes), or keys (the first signs): docs/security.md. */
  signingKey?: Uint8Array | Uint8Array[];
  /** The `lua/` directory (default: ASYNQPY_LUA_DIR, else the repository this package is in). */
  luaDir?: string;
  /** Seconds between two looks at a task waited for (a lost notification). */
  recheck?: number;
}

/** The key of queue `queue` named `name` in the scripts' headers (docs/protocol-reference.md). */
export function queueKey(queue: string, name: string): string {
  return `asynqpy:{${queue}}:${name === "tasks" ? "t" : name}`;
}

function validateQueue(queue: unknown): string {
  if (typeof queue !== "string" || !QUEUE_RE.test(queue)) {
    throw new InvalidArgumentError(`invalid queue name ${JSON.stringify(queue)}: use 1-128 characters from A-Z a-z 0-9 _ . : -`);
  }
  return queue;
}

function validateTenant(tenant: unknown): string {
  if (typeof tenant !== "string") {
    throw new InvalidArgumentError("tenant must be a string");
  }
  const raw = Buffer.from(tenant, "utf8");
  if (raw.length < 1 || raw.length > 64 || raw.some((b) => b < 0x20) || tenant === "." || tenant === "..") {
    throw new InvalidArgumentError(`tenant must be 1 to 64 bytes of UTF-8 with no control character, not . or .., got ${JSON.stringify(tenant)}`);
  }
  return tenant;
}

function seconds(name: string, v: unknown, min = 0): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < min) {
    throw new InvalidArgumentError(`${name} must be a number of seconds >= ${min}, got ${String(v)}`);
  }
  return v;
}

function epochMs(name: string, v: unknown): number {
  const ms = v instanceof Date ? v.getTime() : v;
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new InvalidArgumentError(`${name} must be a Date or Unix milliseconds, got ${String(v)}`);
  }
  return ms;
}

/** A random task id: 96 bits, 16 URL-safe characters, never starting with '-'. */
export function newTaskId(): string {
  const id = randomBytes(12).toString("base64url");
  return id[0] === "-" ? "_" + id.slice(1) : id;
}

/** A random inbox id: 12 URL-safe characters (72 bits). */
export function newInboxId(): string {
  return randomBytes(9).toString("base64url");
}

/** A workflow record's item list: each item '<length>:<bytes>' (rec_pack, docs/protocol.md). */
export function recPack(items: Uint8Array[]): Buffer {
  return Buffer.concat(items.flatMap((b) => [Buffer.from(`${b.length}:`), Buffer.from(b)]));
}

/** A task's reference in workflow records: rec_pack{queue, id}. */
export function ref(queue: string, id: string): Buffer {
  return recPack([Buffer.from(queue, "utf8"), Buffer.from(id, "utf8")]);
}

/** The protocol version of a store whose key holds `raw` (null: absent = 1), or ProtocolVersionError. */
export function readVersion(raw: string | null): number {
  if (raw === null) {
    return 1;
  }
  if (!/^[0-9]{1,9}$/.test(raw) || Number(raw) <= 0) {
    throw new ProtocolVersionError(`${PROTOCOL_KEY} holds ${JSON.stringify(raw.slice(0, 40))}, not a protocol version (a positive integer): this is not an asynqpy store, or it was damaged; nothing was written`, null);
  }
  const stored = Number(raw);
  if (stored > PROTOCOL_VERSION) {
    throw new ProtocolVersionError(`this Redis holds asynqpy protocol ${stored}, newer than asynqpy-client (Node) ${VERSION} understands (protocol ${PROTOCOL_VERSION}): upgrade asynqpy-client here (docs/releases.md); nothing was written`, stored);
  }
  if (stored < OLDEST_READ) {
    throw new ProtocolVersionError(`this Redis holds asynqpy protocol ${stored}, older than asynqpy-client (Node) ${VERSION} reads (protocol ${OLDEST_READ} to ${PROTOCOL_VERSION}): run asynqpy upgrade first (docs/releases.md); nothing was written`, stored);
  }
  return stored;
}

type Reply = number | Buffer | null | Reply[];

/** A prepared task: its queue, id, message and how it is stored. */
interface Prepared {
  queue: string;
  id: string;
  generated: boolean;
  msg: codec.Message;
  data: Buffer;
  delayMs: number;
  uniqueTtl: number;
  policy: string;
}

const POLICIES: Record<string, string> = { cancel: "c", run: "r", ignore: "i" };

/**
 * An asynqpy producer on one Redis: {@link enqueue}, {@link getTask}, {@link result}. Its first
 * call checks the store's protocol version (docs/protocol.md) and refuses a store it does not
 * understand with ProtocolVersionError before writing anything.
 */
export class Client {
  readonly redis: Redis;
  private readonly own: boolean;
  private readonly keys: Uint8Array[];
  private readonly root: string;
  private readonly scripts = new Map<string, Script>();
  private protocol = 0;
  private readonly recheck: number;

  /** `redis`: an ioredis connection (left open by close()) or a redis:// URL. */
  constructor(redis: Redis | string, options: ClientOptions = {}) {
    this.own = typeof redis === "string";
    this.redis = typeof redis === "string" ? new Redis(redis, { lazyConnect: false }) : redis;
    const k = options.signingKey;
    this.keys = k === undefined ? [] : k instanceof Uint8Array ? [k] : [...k];
    if (k !== undefined && this.keys.length === 0) {
      throw new InvalidArgumentError("signingKey is an empty list");
    }
    for (const key of this.keys) {
      if (!(key instanceof Uint8Array) || key.length < 16) {
        throw new InvalidArgumentError("a signing key is a Buffer (Uint8Array) of at least 16 bytes");
      }
    }
    this.root = options.luaDir ?? luaDir();
    this.recheck = options.recheck ?? 5;
  }

  /** Closes the connections this client opened. */
  async close(): Promise<void> {
    if (this.own) {
      await this.redis.quit();
    }
  }

  /** The store's protocol version, checked once (a writer stamps an absent key with SET NX). */
  async checkProtocol(stamp = true): Promise<number> {
    if (this.protocol) {
      return this.protocol;
    }
    let raw = await this.redis.get(PROTOCOL_KEY);
    if (raw === null && stamp) {
      const set = await this.redis.set(PROTOCOL_KEY, "1", "NX");
      if (set === null) {
        raw = await this.redis.get(PROTOCOL_KEY);
      }
    }
    const version = readVersion(raw);
    if (stamp || raw !== null) {
      this.protocol = version;
    }
    return version;
  }

  private script(name: string): Script {
    let s = this.scripts.get(name);
    if (s === undefined) {
      s = loadScript(this.root, name);
      this.scripts.set(name, s);
    }
    return s;
  }

  /** Runs script `name` of queue `queue`: each key its header names is the queue's key of that
   * name unless `named` gives it; the arguments by name. EVALSHA, EVAL when Redis lacks it. */
  async run(name: string, queue: string, named: Record<string, unknown>): Promise<Reply> {
    const s = this.script(name);
    const all: Record<string, unknown> = {};
    for (const k of s.keys) {
      all[k] = queueKey(queue, k);
    }
    Object.assign(all, named);
    const { keys, args } = bind(s, all);
    const argv = [...keys, ...args].map((v) => (typeof v === "number" ? String(v) : v)) as (string | Buffer)[];
    try {
      return (await this.redis.callBuffer("EVALSHA", s.sha, keys.length, ...argv)) as Reply;
    } catch (e) {
      if (!String((e as Error).message).startsWith("NOSCRIPT")) {
        throw refusal(e);
      }
    }
    try {
      return (await this.redis.callBuffer("EVAL", s.source, keys.length, ...argv)) as Reply;
    } catch (e) {
      throw refusal(e);
    }
  }

  private seal(queue: string, id: string, data: Buffer): Buffer {
    return this.keys.length ? codec.seal(this.keys[0], queue, id, data) : data;
  }

  /**
   * Enqueues a task; returns its TaskInfo (its state: pending, scheduled, blocked, waiting or
   * archived). Raises InvalidArgumentError, DuplicateTaskError, TaskIdConflictError,
   * TaskNotFoundError (a parent of `after` that does not exist), QueueRefusedError.
   */
  async enqueue(type: string, payload: unknown = null, options: EnqueueOptions = {}): Promise<TaskInfo> {
    return this.store(prepare(type, payload, options));
  }

  /**
   * Enqueues a task and waits for its outcome (as the Python `Client.call`): the task names an
   * inbox of this call (its `reply_to`), to which the script that finishes it pushes the outcome,
   * so a task deleted when it completes (retention 0) is waited for too. Its result; raises as
   * {@link enqueue} and {@link result} do.
   */
  async call(type: string, payload: unknown = null, options: EnqueueOptions & { timeout?: number } = {}): Promise<unknown> {
    const { timeout, ...rest } = options;
    const deadline = timeout === undefined ? Infinity : Date.now() + seconds("timeout", timeout) * 1000;
    const inbox = newInboxId();
    const info = await this.store(prepare(type, payload, rest, Date.now(), inbox));
    const first = info.state === "archived" ? await this.run("watch", info.queue, { id: info.id, inbox: "" }) : 1;
    return this.wait(info.id, info.queue, inbox, first, deadline, timeout);
  }

  private async store(p: Prepared): Promise<TaskInfo> {
    const { type, payload } = p.msg;
    await this.checkProtocol();
    await this.redis.sadd(ALL_QUEUES, p.queue);
    const info: TaskInfo = { id: p.id, queue: p.queue, state: "pending", type, payload: payload ?? null };
    if (p.msg.after) {
      info.state = await this.enqueueAfter(p);
    } else if (p.delayMs > 0) {
      const reply = await this.run("schedule", p.queue, {
        lock: this.lock(p), id: p.id, msg: this.seal(p.queue, p.id, p.data), unique: p.uniqueTtl,
        delay: Math.min(p.delayMs, MAX_DELAY_MS), now: "", check: p.generated ? "0" : "1", mode: "",
      });
      info.due = newTaskCode(p, reply);
      info.state = "scheduled";
    } else if (p.msg.key) {
      const reply = await this.run("enqueue_keyed", p.queue, {
        keylist: queueKey(p.queue, `key:${p.msg.key}`), id: p.id, msg: this.seal(p.queue, p.id, p.data),
        check: p.generated ? "0" : "1", key: p.msg.key, now: "",
      });
      info.state = newTaskCode(p, reply) === 2 ? "blocked" : "pending";
    } else {
      const reply = await this.run("enqueue", p.queue, {
        lock: this.lock(p), id: p.id, msg: this.seal(p.queue, p.id, p.data), unique: p.uniqueTtl,
        check: p.generated ? "0" : "1",
      });
      newTaskCode(p, reply);
    }
    return info;
  }

  private lock(p: Prepared): string {
    return queueKey(p.queue, p.uniqueTtl ? `u:${codec.lockDigest(p.msg)}` : "u:");
  }

  /** enqueue(after=): registers the child with each parent (each in its own slot), then stores it. */
  private async enqueueAfter(p: Prepared): Promise<string> {
    const parents = p.msg.after as [string, string][];
    const child = ref(p.queue, p.id);
    const ends: Buffer[] = [];
    let failed: [string, string] | null = null;
    for (const [q, i] of parents) {
      const reply = (await this.run("register_child", q, { parent: i, child })) as Reply[];
      const code = reply[0] as number;
      if (code === 0) {
        throw new TaskNotFoundError(`after=: no task ${JSON.stringify(i)} in queue ${JSON.stringify(q)} (deleted, or it completed without retention: its result is gone)`);
      }
      if (code === 4) {
        throw new InvalidArgumentError(`after=: task ${JSON.stringify(i)} of queue ${JSON.stringify(q)} is in an aggregation group or targeted: it cannot be a parent`);
      }
      let state = Buffer.alloc(0);
      if (code === 2) {  // completed: 'c' + its result's msgpack ('' for nil)
        const result = codec.rawField(codec.untagged(reply[1] as Buffer), codec.FIELD_INDEX.result);
        state = Buffer.concat([Buffer.from("c"), result === undefined || (result.length === 1 && result[0] === 0xc0) ? Buffer.alloc(0) : Buffer.from(result)]);
      } else if (code === 3) {
        state = Buffer.from("x");
        failed = failed ?? [q, i];
      }
      ends.push(ref(q, i), state);
    }
    let cancelled: Buffer | string = "";
    if (p.policy === "c") {
      const lastError = failed
        ? `cancelled: parent ${failed[0]}/${failed[1]} was archived (on_parent_failure='cancel')`
        : "cancelled: a parent was archived or deleted before this task was stored (on_parent_failure='cancel')";
      const msg = { ...p.msg, last_error: lastError, last_failed_at_ms: Date.now() };
      cancelled = this.seal(p.queue, p.id, codec.encode(msg));
    }
    const reply = await this.run("enqueue_after", p.queue, {
      id: p.id, msg: this.seal(p.queue, p.id, p.data), check: p.generated ? "0" : "1", policy: p.policy,
      now: "", delay: Math.min(p.delayMs, MAX_DELAY_MS), cancelled, ends,
    });
    const code = newTaskCode(p, reply);
    return { 1: "pending", 2: "waiting", 3: "archived", 4: "scheduled" }[code] ?? "unknown";
  }

  /** The task `id` of `queue` as stored now (its state, message fields), or null if there is none. */
  async getTask(id: string, queue = "default"): Promise<TaskInfo | null> {
    validateQueue(queue);
    await this.checkProtocol(false);
    const stored = await this.redis.hgetBuffer(queueKey(queue, "tasks"), id);
    if (stored === null) {
      return null;
    }
    const code = String.fromCharCode(stored[0]);
    const active = code === "a";
    const message = codec.decode(active ? stored.subarray(1 + TOKEN_LEN) : stored.subarray(1));
    const info: TaskInfo = { id, queue, state: STATES[code] ?? "unknown", type: message.type, payload: message.payload, message };
    if (active) {
      info.token = stored.subarray(1, 1 + TOKEN_LEN).toString("latin1");
    }
    return info;
  }

  /**
   * Waits for task `id`'s outcome: its result once completed; TaskFailedError once archived;
   * TaskNotFoundError if there is no such task; WaitTimeoutError after `timeout` seconds.
   * The outcome arrives by push (the watch script registers an inbox the worker pushes to);
   * every `recheck` seconds the task is looked at again (a notification lost to a crash).
   */
  async result(id: string, options: { queue?: string; timeout?: number } = {}): Promise<unknown> {
    const queue = validateQueue(options.queue ?? "default");
    await this.checkProtocol();
    const inbox = newInboxId();
    const deadline = options.timeout === undefined ? Infinity : Date.now() + seconds("timeout", options.timeout) * 1000;
    const reply = await this.run("watch", queue, { id, inbox });
    return this.wait(id, queue, inbox, reply, deadline, options.timeout);
  }

  /** Waits on `inbox` for task `id`'s outcome, from a watch reply (`reply`), until `deadline`. */
  private async wait(id: string, queue: string, inbox: string, first: Reply, deadline: number, timeout?: number): Promise<unknown> {
    const inboxKey = queueKey(queue, `reply:${inbox}`);
    const blocking = this.redis.duplicate();  // a wait's own connection: waits in parallel do not queue
    try {
      return await this.waitOn(blocking, inboxKey, id, queue, first, deadline, timeout);
    } finally {
      blocking.disconnect();
    }
  }

  private async waitOn(blocking: Redis, inboxKey: string, id: string, queue: string, first: Reply, deadline: number,
    timeout?: number): Promise<unknown> {
    let reply = first;
    let missing = 0;
    for (;;) {
      if (Buffer.isBuffer(reply)) {
        return outcomeOfStored(id, queue, reply);
      }
      if (reply === 0) {  // believed at the second look: a push may be on its way
        missing += 1;
        if (missing >= 2) {
          throw new TaskNotFoundError(`task ${id} not found in queue ${queue}: it never existed, was deleted, or finished without a kept result (retention 0) before the wait began`);
        }
      } else {
        missing = 0;
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        throw new WaitTimeoutError(`no outcome of task ${id} in queue ${queue} within ${timeout} s`);
      }
      const wait = reply === 0 ? 0.2 : Math.min(left / 1000, this.recheck);
      const got = await blocking.blpopBuffer(inboxKey, Math.max(0.01, wait));
      if (got !== null) {
        const entry = codec.unpack(got[1]) as [Uint8Array, string, unknown];
        if (Array.isArray(entry) && entry.length === 3 && Buffer.from(entry[0]).toString("utf8") === id) {
          if (entry[1] === "c") {
            return entry[2];
          }
          if (entry[1] === "x") {
            throw new TaskFailedError(id, queue, String(entry[2]));
          }
        }
        continue;  // a progress report: wait on
      }
      reply = await this.run("watch", queue, { id, inbox: "" });
    }
  }
}

function outcomeOfStored(id: string, queue: string, stored: Buffer): unknown {
  const msg = codec.decode(stored.subarray(1));
  if (stored[0] === 0x63) {  // 'c'
    return msg.result;
  }
  throw new TaskFailedError(id, queue, msg.last_error);
}

/** A script's error reply: its refusal of an input (asynqpy-refused:) as InvalidArgumentError. */
function refusal(e: unknown): Error {
  const text = String((e as Error).message ?? e);
  const at = text.indexOf(SCRIPT_REFUSED);
  return at >= 0 ? new InvalidArgumentError(text.slice(at + SCRIPT_REFUSED.length).trim()) : (e as Error);
}

/** The reply of a script storing a new task: its code (or due time), else the typed refusal. */
function newTaskCode(p: Prepared, reply: Reply): number {
  if (Array.isArray(reply)) {
    const holder = Buffer.isBuffer(reply[1]) ? reply[1].toString("utf8") : String(reply[1]);
    throw new DuplicateTaskError(`a unique task with this key is live in queue '${p.queue}': '${holder}'`, holder,
      Math.max(0, Number(reply[2])) / 1000);
  }
  const code = Number(reply);
  if (code === -2) {
    throw new TaskIdConflictError(`a live task with id '${p.id}' exists in queue '${p.queue}'`);
  }
  if (code < 0) {
    throw new QueueRefusedError(`queue '${p.queue}' refused 1 task(s) (reply ${code})`, code);
  }
  return code;
}

function parents(after: Parent | Parent[], queue: string): [string, string][] {
  const items: Parent[] = Array.isArray(after)
    ? (after as Parent[]) : [after as Parent];
  const out: [string, string][] = [];
  for (const item of items) {
    let pair: [string, string];
    if (typeof item === "string") {
      pair = [queue, item];
    } else if (Array.isArray(item) && item.length === 2) {
      pair = [item[0], item[1]];
    } else if (item && typeof item === "object" && "id" in item && "queue" in item) {
      pair = [item.queue, item.id];
    } else {
      throw new InvalidArgumentError(`after= takes TaskInfo objects, task ids or [queue, id] pairs, got ${JSON.stringify(item)}`);
    }
    if (typeof pair[1] !== "string" || !pair[1] || pair[1].length > 256) {
      throw new InvalidArgumentError(`after=: ${JSON.stringify(pair[1])} is not a task id`);
    }
    validateQueue(pair[0]);
    if (!out.some(([q, i]) => q === pair[0] && i === pair[1])) {
      out.push(pair);
    }
  }
  if (out.length === 0 || out.length > 1000) {
    throw new InvalidArgumentError("after= names 1 to 1000 parents");
  }
  return out;
}

const KNOWN = new Set(["queue", "taskId", "processAt", "processIn", "unique", "uniqueKey", "priority", "tenant", "key",
  "after", "onParentFailure", "maxRetry", "timeout", "retention", "retryDelay", "deadline", "headers", "retryFront"]);

/** Validates a task's arguments and makes its message (as the Python client's options.prepare). */
export function prepare(type: string, payload: unknown, o: EnqueueOptions, nowMs = Date.now(), replyTo = ""): Prepared {
  for (const k of Object.keys(o)) {
    if (!KNOWN.has(k)) {
      throw new InvalidArgumentError(`unknown enqueue option ${JSON.stringify(k)} (known: ${[...KNOWN].join(", ")})`);
    }
  }
  if (typeof type !== "string" || type === "" || type.length > 256) {
    throw new InvalidArgumentError("the task type is a non-empty string of at most 256 characters");
  }
  const queue = validateQueue(o.queue ?? "default");
  const given = (k: keyof EnqueueOptions): boolean => o[k] !== undefined && o[k] !== null;
  if (given("processAt") && given("processIn")) {
    throw new InvalidArgumentError("give processAt or processIn, not both");
  }
  if (given("after") && (given("unique") || given("uniqueKey"))) {
    throw new InvalidArgumentError("after= cannot be combined with group, unique/unique_key/throttle/debounce or workers/runs");
  }
  if (given("key") && (given("unique") || given("uniqueKey"))) {
    throw new InvalidArgumentError("key= (serial execution) cannot be combined with unique yet");
  }
  if (given("key") && given("after")) {
    throw new InvalidArgumentError("key= (serial execution) cannot be combined with group, workers/runs, after or throttle/debounce yet");
  }
  const priority = o.priority ?? 5;
  if (!Number.isInteger(priority) || priority < 0 || priority > 9) {
    throw new InvalidArgumentError(`priority must be an int from 0 (lowest) to 9 (highest), got ${String(priority)}`);
  }
  let uniqueTtl = 0;
  if (given("unique")) {
    uniqueTtl = Math.ceil(seconds("unique", o.unique, 1));
  } else if (given("uniqueKey")) {
    uniqueTtl = DEFAULT_UNIQUE_KEY_TTL;
  }
  if (given("uniqueKey") && (typeof o.uniqueKey !== "string" || !o.uniqueKey || o.uniqueKey.length > 1024)) {
    throw new InvalidArgumentError("uniqueKey is a string of 1 to 1024 characters");
  }
  if (given("key") && (typeof o.key !== "string" || !o.key || o.key.length > 1024)) {
    throw new InvalidArgumentError("key is a string of 1 to 1024 characters");
  }
  let delayMs = 0;
  if (given("processIn")) {
    delayMs = Math.floor(seconds("processIn", o.processIn) * 1000);
  } else if (given("processAt")) {
    delayMs = Math.max(0, Math.floor(epochMs("processAt", o.processAt) - nowMs));
  }
  const maxRetry = o.maxRetry ?? 25;
  if (!Number.isInteger(maxRetry) || maxRetry < 0) {
    throw new InvalidArgumentError(`maxRetry must be an int >= 0, got ${String(maxRetry)}`);
  }
  const policy = POLICIES[o.onParentFailure ?? "cancel"];
  if (policy === undefined) {
    throw new InvalidArgumentError(`onParentFailure must be one of cancel, run, ignore, got ${String(o.onParentFailure)}`);
  }
  let id = "";
  if (given("taskId")) {
    if (typeof o.taskId !== "string" || !o.taskId || o.taskId.length > 256) {
      throw new InvalidArgumentError("taskId is a string of 1 to 256 characters");
    }
    id = o.taskId;
  }
  const msg: codec.Message = {
    type, payload, enqueued_at_ms: nowMs, max_retry: maxRetry,
    timeout_ms: o.timeout === undefined ? -1 : o.timeout === null ? 0 : Math.max(1, Math.floor(seconds("timeout", o.timeout) * 1000)),
    deadline_ms: given("deadline") ? Math.floor(epochMs("deadline", o.deadline)) : 0,
    retention_ms: given("retention") ? Math.floor(seconds("retention", o.retention) * 1000) : 0,
    unique: uniqueTtl > 0,
    retry_delay_ms: given("retryDelay") ? Math.floor(seconds("retryDelay", o.retryDelay) * 1000) : -1,
    headers: o.headers ?? null, reply_to: replyTo, unique_key: o.uniqueKey ?? "", priority,
    after: given("after") ? parents(o.after as Parent | Parent[], queue) : null,
    key: o.key ?? "", retry_front: o.retryFront ?? false, tenant: given("tenant") ? validateTenant(o.tenant) : "",
  };
  if (msg.headers !== null && (typeof msg.headers !== "object" || !Object.values(msg.headers).every((v) => typeof v === "string"))) {
    throw new InvalidArgumentError("headers is an object of strings");
  }
  let data: Buffer;
  try {
    data = codec.encode(msg);
  } catch (e) {
    throw new InvalidArgumentError(`payload is not msgpack-serializable: ${(e as Error).message}`);
  }
  return { queue, id: id || newTaskId(), generated: !id, msg, data, delayMs, uniqueTtl, policy };
}


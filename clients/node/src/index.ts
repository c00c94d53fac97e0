/** asynqpy's producer for Node: see README.md and docs/clients.md of the repository. */
export * from "./client";
export * from "./errors";
export * as codec from "./codec";
export { loadScript, luaDir, scriptNames } from "./scripts";

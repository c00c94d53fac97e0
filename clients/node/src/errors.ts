/** The errors of the Node client, named as the Python library's (asynqpy/core/model/errors.py). */

/** Base of every error the client raises itself. */
export class AsynqpyError extends Error {
  override name = "AsynqpyError";
}

/** An argument is invalid (an empty type, a bad queue name, options that cannot go together...). */
export class InvalidArgumentError extends AsynqpyError {
  override name = "InvalidArgumentError";
}

/** A unique task with the same lock is live: `holder` holds it for `secondsLeft` more. */
export class DuplicateTaskError extends AsynqpyError {
  override name = "DuplicateTaskError";
  constructor(message: string, readonly holder: string, readonly secondsLeft: number) {
    super(message);
  }
}

/** A live task has the id given (`taskId`). */
export class TaskIdConflictError extends AsynqpyError {
  override name = "TaskIdConflictError";
}

/** The queue refused the task (a script's refusal code, e.g. -10: the queue is full). */
export class QueueRefusedError extends AsynqpyError {
  override name = "QueueRefusedError";
  constructor(message: string, readonly code: number) {
    super(message);
  }
}

/** No such task (never enqueued, deleted, or finished without retention before the wait began). */
export class TaskNotFoundError extends AsynqpyError {
  override name = "TaskNotFoundError";
}

/** The task was archived: `error` is its last error. */
export class TaskFailedError extends AsynqpyError {
  override name = "TaskFailedError";
  constructor(readonly id: string, readonly queue: string, readonly error: string) {
    super(`task ${id} in queue ${queue} failed: ${error}`);
  }
}

/** No outcome within the time given. */
export class WaitTimeoutError extends AsynqpyError {
  override name = "WaitTimeoutError";
}

/**
 * The store's protocol version is one this client does not understand (newer, older than it
 * reads, or not a version at all); nothing was written. `stored`: the version found (null: not
 * a version).
 */
export class ProtocolVersionError extends AsynqpyError {
  override name = "ProtocolVersionError";
  constructor(message: string, readonly stored: number | null) {
    super(message);
  }
}

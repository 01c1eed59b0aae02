/**
 * The backend's typed errors, and the one place that classifies JetStream API errors by code
 * (nats.js's JetStreamApiCodes; PROTOCOL.md §5).
 */
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream'

/** A write fenced by the guard: another writer appended to the session first. Nothing was written. */
export class AgentlogConflictError extends Error {
  constructor(
    readonly session: string, readonly firstSeq: number, readonly lastSeq: number,
    readonly expectedStreamSeq: number, detail: string, options?: ErrorOptions,
  ) {
    super(`agentlog: session ${JSON.stringify(session)} seqs ${firstSeq}..${lastSeq}: the session log changed under this writer `
      + `(guard: expected last stream seq ${expectedStreamSeq}): ${detail}`, options)
    this.name = 'AgentlogConflictError'
  }
}

/** Another writer holds a live lease on the session (PROTOCOL.md §5.5). Nothing was written. */
export class AgentlogLeaseHeldError extends AgentlogConflictError {
  constructor(session: string, firstSeq: number, lastSeq: number, readonly holder: Record<string, unknown>) {
    super(session, firstSeq, lastSeq, -1, `the session is being written by writer ${JSON.stringify(holder.writer)} (host ${String(holder.host)}, pid ${String(holder.pid)}, since ${new Date(Number(holder.since)).toISOString()})`)
    this.name = 'AgentlogLeaseHeldError'
  }
}

/**
 * A write refused because events this writer had acknowledged are no longer in the stored log
 * (PROTOCOL.md §5.7): the server lost them (or they were purged), and the session may have been
 * re-grown by another writer since. fromSeq..toSeq is the acknowledged seq range that is gone;
 * found says what the stream leader holds instead. Nothing was written, and the writer does not
 * write the session again until it is loaded again (a resume).
 */
export class AgentlogAckedLostError extends AgentlogConflictError {
  constructor(
    session: string, firstSeq: number, lastSeq: number, expectedStreamSeq: number,
    readonly fromSeq: number, readonly toSeq: number, readonly found: string, options?: ErrorOptions,
  ) {
    super(session, firstSeq, lastSeq, expectedStreamSeq, found, options)
    this.name = 'AgentlogAckedLostError'
    this.message = `agentlog: session ${JSON.stringify(session)} seqs ${firstSeq}..${lastSeq}: acknowledged events ${fromSeq}..${toSeq} `
      + `are no longer in the stored log (the writer's last record was at stream seq ${expectedStreamSeq}; ${found}); `
      + 'nothing was written: load the session again to write it'
  }
}

/**
 * nats-server's code for an atomic batch that holds an already stored Nats-Msg-Id, which nats.js
 * 3.4's JetStreamApiCodes does not name (orbit.go's jetstreamext: JSErrCodeBatchPublishDuplicateMsgID).
 */
const BATCH_PUBLISH_DUPLICATE_MSG_ID = 10201

/** The JetStream API error code of err (undefined when it is no API error). */
function apiCode(err: unknown): number | undefined {
  return err instanceof JetStreamApiError ? err.code : undefined
}

/**
 * A guarded publish refused because the subject's last sequence is not the expected one: 10071,
 * or 10164 when the subject has a message in flight on a replicated stream.
 */
export function isWrongLastSequence(err: unknown): boolean {
  const code = apiCode(err)
  return code === JetStreamApiCodes.StreamWrongLastSequence || code === JetStreamApiCodes.StreamWrongLastSequenceUnknown
}

/** An atomic batch refused because it holds a Nats-Msg-Id the stream already stored (a retried split append). */
export function isBatchDuplicateMsgId(err: unknown): boolean {
  return apiCode(err) === BATCH_PUBLISH_DUPLICATE_MSG_ID
}

/** The stream (or the stream of a KV or Object Store bucket) does not exist. */
export function isStreamNotFound(err: unknown): boolean {
  return apiCode(err) === JetStreamApiCodes.StreamNotFound
}

/** A get found no message. */
export function isNoMessageFound(err: unknown): boolean {
  return apiCode(err) === JetStreamApiCodes.NoMessageFound
}

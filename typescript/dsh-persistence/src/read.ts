/**
 * The read path: a session's metadata and records (direct gets, checked for headers, counts,
 * continuity and the session they name), and the list of stored sessions.
 */
import type { StoredMsg } from '@nats-io/jetstream'
import { resolveBlobs } from './blobs.js'
import type { MetaEntry, Store, Tail } from './store.js'
import {
  AgentlogWireError, HEADER_COUNT, HEADER_FIRST_SEQ, HEADER_MSG_ID, decodeRecord, idFromToken, parseHeaderLine, type WireEvent, type WireHeader,
} from './wire.js'

/** How many KV reads `listStored` runs at once. */
const LIST_CONCURRENCY = 32

/** Records the direct batch get of readAll asks for at once. */
const READ_BATCH = 256

/** How long readAll waits, in all, for a replica behind the leader to catch up (ms). */
const READ_CATCH_UP_MS = 2000

function checkSession(id: string, found: string): void {
  if (found !== id) {
    throw new AgentlogWireError(id, -1, 'record-session', `a record on this session's subject names session ${JSON.stringify(found)}`)
  }
}

/** A stored session's last record and metadata. */
export interface Head { last: StoredMsg; entry: MetaEntry; meta: WireHeader }

/**
 * The session's last record and its metadata entry; undefined when it has no record (a session
 * with metadata only is not materialized), an Error when it has records but no metadata.
 */
export async function readHead(s: Store, id: string, tok: string, signal?: AbortSignal): Promise<Head | undefined> {
  const subject = s.subject(tok)
  // From the stream leader: the records read after it (direct gets, which a follower behind the
  // leader may answer) are read up to it, so none acked before the read began is missed.
  const last = await s.leaderLastRecord(subject)
  signal?.throwIfAborted()
  if (last === null) return undefined
  const entry = await s.readMeta(tok)
  signal?.throwIfAborted()
  if (entry === null) {
    throw new Error(`agentlog: session ${JSON.stringify(id)} has records on ${subject} but no metadata (key ${tok} in KV bucket ${s.names.sessionsBucket})`)
  }
  if (entry.completeAt > 0) {
    // A fork child whose seed is still being written (Agentlog-Incomplete): not materialized
    // until its log holds the marked count of events.
    const end = Number(last.header.get(HEADER_FIRST_SEQ)) + Number(last.header.get(HEADER_COUNT))
    if (!(end >= entry.completeAt)) return undefined
  }
  return { last, entry, meta: parseHeaderLine(id, entry.value) }
}

/**
 * Every event of the session up to its last record `last` (offloaded events read back), the
 * number of records, and the tail they end at. A session of one record is read from `last` alone.
 */
export async function readEvents(s: Store, id: string, tok: string, last: StoredMsg, signal?: AbortSignal): Promise<{ events: WireEvent[]; records: number; tail: Tail }> {
  const lastDec = decodeRecord(k => last.header.values(k), last.string(), last.seq)
  let events: WireEvent[]
  let records: number
  if (lastDec.info.firstSeq === 0) {
    checkSession(id, lastDec.info.session)
    events = await resolveBlobs(s, id, tok, lastDec, last.seq)
    records = 1
  } else {
    ({ events, records } = await readAll(s, id, tok, last.seq, signal))
    checkSession(id, lastDec.info.session)
  }
  return { events, records, tail: { streamSeq: last.seq, nextSeq: events.length, msgId: last.header.get(HEADER_MSG_ID) } }
}

/**
 * Read every record of a session up to stream seq `upTo` (direct batch gets, in order; no consumer).
 * A batch that ends before `upTo` was answered by a replica behind the leader (it holds a prefix):
 * it is asked again, with a short backoff, up to READ_CATCH_UP_MS in all.
 */
async function readAll(s: Store, id: string, tok: string, upTo: number, signal?: AbortSignal): Promise<{ events: WireEvent[]; records: number }> {
  const subject = s.subject(tok)
  const events: WireEvent[] = []
  let records = 0
  let from = 1
  let waited = 0
  let backoff = 0
  while (from <= upTo) {
    signal?.throwIfAborted()
    const iter = await s.jsm.direct.getBatch(s.names.stream, { seq: from, next_by_subj: subject, batch: READ_BATCH })
    let got = 0
    for await (const m of iter) {
      got++
      from = m.seq + 1
      if (m.seq > upTo) break
      const dec = decodeRecord(k => m.header.values(k), m.string(), m.seq)
      const info = dec.info
      checkSession(id, info.session)
      const evs = await resolveBlobs(s, id, tok, dec, m.seq)
      if (info.firstSeq !== events.length) {
        throw new AgentlogWireError(id, info.firstSeq, 'record-continue',
          `record at stream seq ${m.seq} starts at seq ${info.firstSeq}, but the records before it end at seq ${events.length - 1}`)
      }
      for (const e of evs) events.push(e)
      records++
    }
    if (got === 0) {
      if (waited >= READ_CATCH_UP_MS) {
        throw new Error(`agentlog: session ${JSON.stringify(id)}: reading ${subject} stopped at stream seq ${from}, before its last record at stream seq ${upTo} (still so after ${waited} ms: records purged?)`)
      }
      backoff = Math.min(Math.max(2 * backoff, 5), 200)
      waited += backoff
      await new Promise(resolve => setTimeout(resolve, backoff))
    } else {
      waited = 0
      backoff = 0
    }
  }
  return { events, records }
}

/** A stored session: its metadata and record count. */
export interface StoredSession { header: WireHeader; records: number }

/** Every session with at least one record and readable metadata, by id. */
export async function listStored(s: Store, signal?: AbortSignal): Promise<StoredSession[]> {
  const si = await s.jsm.streams.info(s.names.stream, { subjects_filter: `${s.names.subjectPrefix}.>` })
  signal?.throwIfAborted()
  const subjects = Object.entries(si.state.subjects ?? {})
  const out: StoredSession[] = []
  const prefixDots = s.names.subjectPrefix.split('.').length
  let next = 0
  const worker = async () => {
    while (next < subjects.length) {
      const [subject, records] = subjects[next++]!
      const tok = subject.split('.')[prefixDots + 1]
      if (tok === undefined) continue
      let id: string
      try { id = idFromToken(tok) } catch { continue }
      const entry = await s.readMeta(tok)
      if (entry === null || entry.completeAt > 0) continue // none, or a fork child being written
      let header: WireHeader
      try { header = parseHeaderLine(id, entry.value) } catch { continue } // as the JSONL backend skips a bad header line
      out.push({ header, records })
    }
  }
  await Promise.all(Array.from({ length: Math.min(LIST_CONCURRENCY, subjects.length) }, worker))
  signal?.throwIfAborted()
  out.sort((a, b) => a.header.id < b.header.id ? -1 : a.header.id > b.header.id ? 1 : 0)
  return out
}

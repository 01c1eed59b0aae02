/**
 * The read path: a session's metadata and records (direct gets, checked for headers, counts,
 * continuity and the session they name), and the list of stored sessions.
 */
import type { StoredMsg } from '@nats-io/jetstream'
import { ARCHIVE_PREFIX, ARCHIVE_STREAM, HEADER_ARCHIVE_ID, archivesApply, locate, readArchive, readArchiveHead, type Archived } from './archive.js'
import { isStreamNotFound } from './errors.js'
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
      if (records === 0 && info.firstSeq > 0) {
        // The log's first events are in its archive (PROTOCOL.md §13, case 3).
        // (A newer archive holds the hot records too: only its events before them are taken.)
        for (const e of (await coldPrefix(s, id, tok)).events.slice(0, info.firstSeq)) events.push(e)
      }
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

/**
 * The archive a session's hot records continue (PROTOCOL.md §13, case 3), read whole and checked,
 * its incarnation the metadata's.
 */
async function coldPrefix(s: Store, id: string, tok: string): Promise<Archived> {
  const loc = await locate(s, id, tok, true)
  if (loc.archive === undefined) {
    throw new AgentlogWireError(id, 0, 'record-continue', `the hot records no longer start at seq 0 (read again: the session was archived while it was read?)`)
  }
  const a = await readArchive(s, loc.archive)
  await checkIncarnation(s, id, tok, a)
  return a
}

async function checkIncarnation(s: Store, id: string, tok: string, a: Archived): Promise<MetaEntry> {
  const entry = await s.readMeta(tok)
  if (entry === null) {
    throw new Error(`agentlog: session ${JSON.stringify(id)} has an archive (${a.head.archiveId}) but no metadata (key ${tok} in KV bucket ${s.names.sessionsBucket})`)
  }
  if (entry.incarnation !== a.head.incarnation) {
    throw new Error(`agentlog: session ${JSON.stringify(id)}: its archive ${a.head.archiveId} is of incarnation ${JSON.stringify(a.head.incarnation)}, its metadata of ${JSON.stringify(entry.incarnation)}`)
  }
  return entry
}

/** An archived session (no hot record, an archive: PROTOCOL.md §13 case 2) read whole. */
export interface ArchivedSession { entry: MetaEntry; meta: WireHeader; archived: Archived }

/**
 * The session with no hot record, read from its archive (checked against its head, its incarnation
 * the metadata's); undefined when it has no archive either.
 */
export async function readArchivedSession(s: Store, id: string, tok: string, signal?: AbortSignal): Promise<ArchivedSession | undefined> {
  const head = await readArchiveHead(s, id, tok)
  signal?.throwIfAborted()
  if (head === undefined) return undefined
  const archived = await readArchive(s, head)
  signal?.throwIfAborted()
  const entry = await checkIncarnation(s, id, tok, archived)
  return { entry, meta: parseHeaderLine(id, entry.value), archived }
}

/** A stored session: its metadata and record count (hot records; 0 for an archived session, whose archive id is given). */
export interface StoredSession { header: WireHeader; records: number; archiveId?: string }

/** Every session with at least one record and readable metadata, by id. */
export async function listStored(s: Store, signal?: AbortSignal): Promise<StoredSession[]> {
  const si = await s.jsm.streams.info(s.names.stream, { subjects_filter: `${s.names.subjectPrefix}.>` })
  signal?.throwIfAborted()
  const subjects: [string, number][] = Object.entries(si.state.subjects ?? {})
  const out: StoredSession[] = []
  const prefixDots = s.names.subjectPrefix.split('.').length
  const hot = new Set<string>()
  for (const [subject] of subjects) {
    const tok = subject.split('.')[prefixDots + 1]
    if (tok !== undefined) hot.add(tok)
  }
  // Archived sessions (PROTOCOL.md §13): an archive head and no hot record.
  const archived = new Map<string, string>() // token -> head subject
  if (archivesApply(s)) {
    const ai = await s.jsm.streams.info(ARCHIVE_STREAM, { subjects_filter: `${ARCHIVE_PREFIX}.*` }).catch((err: unknown) => {
      if (isStreamNotFound(err)) return undefined
      throw err
    })
    signal?.throwIfAborted()
    for (const subject of Object.keys(ai?.state.subjects ?? {})) {
      const tok = subject.slice(ARCHIVE_PREFIX.length + 1)
      if (!hot.has(tok)) archived.set(tok, subject)
    }
  }
  const todo: [string, number, string | undefined][] = [
    ...subjects.map(([subject, records]): [string, number, string | undefined] => [subject.split('.')[prefixDots + 1] ?? '', records, undefined]),
    ...[...archived].map(([tok, subject]): [string, number, string | undefined] => [tok, 0, subject]),
  ]
  let next = 0
  const worker = async () => {
    while (next < todo.length) {
      const [tok, records, archiveSubj] = todo[next++]!
      if (tok === '') continue
      let archiveId: string | undefined
      if (archiveSubj !== undefined) {
        const m = await s.jsm.direct.getMessage(ARCHIVE_STREAM, { last_by_subj: archiveSubj })
        archiveId = m?.header?.get(HEADER_ARCHIVE_ID)
        if (!archiveId) continue
      }
      let id: string
      try { id = idFromToken(tok) } catch { continue }
      const entry = await s.readMeta(tok)
      if (entry === null || entry.completeAt > 0) continue // none, or a fork child being written
      let header: WireHeader
      try { header = parseHeaderLine(id, entry.value) } catch { continue } // as the JSONL backend skips a bad header line
      out.push(archiveId === undefined ? { header, records } : { header, records, archiveId })
    }
  }
  await Promise.all(Array.from({ length: Math.min(LIST_CONCURRENCY, todo.length) }, worker))
  signal?.throwIfAborted()
  out.sort((a, b) => a.header.id < b.header.id ? -1 : a.header.id > b.header.id ? 1 : 0)
  return out
}

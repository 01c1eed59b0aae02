/**
 * Archived sessions (PROTOCOL.md §13): where a session's log lives (hot records, its archive in
 * AGENTLOG_ARCHIVE, or the archive followed by hot records), and an archive read whole — head,
 * parts, one zstd frame — checked against its head (sizes, SHA-256, archive id of every part).
 */
import { createHash } from 'node:crypto'
import { isDeepStrictEqual } from 'node:util'
import { zstdDecompressSync } from 'node:zlib'
import type { StoredMsg } from '@nats-io/jetstream'
import { decodeStorageRecord } from '@deepseek-ai/dsh-session'
import { isNoMessageFound, isStreamNotFound } from './errors.js'
import type { Store } from './store.js'
import {
  AgentlogWireError, HEADER_FIRST_SEQ, HEADER_INCARNATION, HEADER_SESSION, STREAM_NAME, decodeEventLine, encodeEventLine, idFromToken,
  type WireEvent,
} from './wire.js'

export const ARCHIVE_STREAM = 'AGENTLOG_ARCHIVE'
export const ARCHIVE_PREFIX = 'agentlog.archive'
export const ARCHIVE_FORMAT = '1'
export const HEADER_ARCHIVE_FORMAT = 'Agentlog-Archive-Format'
export const HEADER_ARCHIVE_ID = 'Agentlog-Archive-Id'
export const HEADER_ARCHIVE_PART = 'Agentlog-Archive-Part'
const HEADER_EVENTS = 'Agentlog-Events'
const HEADER_ACTIVITY = 'Agentlog-Last-Activity'
const HEADER_ARCHIVED_AT = 'Agentlog-Archived-At'
const HEADER_JSONL_SIZE = 'Agentlog-JSONL-Size'
const HEADER_JSONL_SHA256 = 'Agentlog-JSONL-SHA256'
const HEADER_COMPRESSION = 'Agentlog-Compression'
const HEADER_PARTS = 'Agentlog-Archive-Parts'
const HEADER_PAYLOAD = 'Agentlog-Payload'

/** The largest packed JSONL an archive read holds in memory, bytes (as the Go reader). */
const MAX_ARCHIVE_JSONL = 1 << 30

/** The Nats-Msg-Id of the records a restore of archive archiveId writes (store.RestoreMsgID). */
export function restoreMsgId(archiveId: string): string { return `restore:${archiveId}` }

/** The subject of the head of session token's archive. */
export function archiveSubject(tok: string): string { return `${ARCHIVE_PREFIX}.${tok}` }

/** The subject of part k (1-based) of archive archiveId of session token. */
export function archivePartSubject(tok: string, archiveId: string, k: number): string {
  return `${ARCHIVE_PREFIX}.${tok}.${archiveId}.${k}`
}

/** An archive, its head or payload not matching: never served (Go's ErrArchiveCorrupt). */
export class AgentlogArchiveCorruptError extends Error {
  constructor(readonly session: string, readonly archiveId: string, detail: string) {
    super(`agentlog: session ${JSON.stringify(session)}: archive ${archiveId}: archive does not match its head: ${detail}`)
    this.name = 'AgentlogArchiveCorruptError'
  }
}

/** A decoded archive head (PROTOCOL.md §13, "The head"). */
export interface ArchiveHead {
  token: string
  id: string
  incarnation: string
  archiveId: string
  events: number
  lastActivity: number
  archivedAt: number
  jsonlSize: number
  jsonlSha256: string
  parts: number
  payloadBytes: number
  projectionsBytes: number
  /** The head message's stream seq in AGENTLOG_ARCHIVE. */
  streamSeq: number
}

/** Decode an archive head's headers; an AgentlogWireError naming the session and the header broken. */
export function parseArchiveHead(id: string, m: StoredMsg): ArchiveHead {
  const where = `archive head ${m.subject} (stream ${ARCHIVE_STREAM} seq ${m.seq})`
  const bad = (detail: string) => new AgentlogWireError(id, -1, 'archive-head', `${where}: ${detail}`)
  const get = (k: string): string => {
    const vs = m.header?.values(k) ?? []
    if (vs.length !== 1) throw bad(`header ${k} has ${vs.length} values, want 1`)
    return vs[0]!
  }
  const num = (k: string, min: number): number => {
    const v = get(k)
    const n = Number(v)
    if (!/^(0|-?[1-9][0-9]*)$/.test(v) || !Number.isSafeInteger(n) || n < min) throw bad(`header ${k} is ${JSON.stringify(v)}, want a decimal integer ≥ ${min}`)
    return n
  }
  const f = get(HEADER_ARCHIVE_FORMAT)
  if (f !== ARCHIVE_FORMAT) throw bad(`header ${HEADER_ARCHIVE_FORMAT} is ${JSON.stringify(f)}, this code reads "${ARCHIVE_FORMAT}"`)
  const token = get(HEADER_SESSION)
  let named: string
  try { named = idFromToken(token) } catch (err) { throw bad(`header ${HEADER_SESSION}: ${(err as Error).message}`) }
  if (named !== id) throw bad(`header ${HEADER_SESSION} names session ${JSON.stringify(named)}`)
  const archiveId = get(HEADER_ARCHIVE_ID)
  if (!/^[0-9A-Za-z]{1,64}$/.test(archiveId)) throw bad(`header ${HEADER_ARCHIVE_ID} is ${JSON.stringify(archiveId)}, want 1..64 of [0-9A-Za-z]`)
  const events = num(HEADER_EVENTS, 1)
  const lastActivity = num(HEADER_ACTIVITY, 0)
  const archivedAt = num(HEADER_ARCHIVED_AT, 0)
  const jsonlSize = num(HEADER_JSONL_SIZE, 1)
  const jsonlSha256 = get(HEADER_JSONL_SHA256)
  if (!/^[0-9a-f]{64}$/.test(jsonlSha256)) throw bad(`header ${HEADER_JSONL_SHA256} is ${JSON.stringify(jsonlSha256)}, want 64 lowercase hex digits`)
  const c = get(HEADER_COMPRESSION)
  if (c !== 'zstd') throw bad(`header ${HEADER_COMPRESSION} is ${JSON.stringify(c)}, this code reads "zstd"`)
  const parts = num(HEADER_PARTS, 1)
  const p = get(HEADER_PAYLOAD)
  const pm = /^([0-9]+) ([0-9]+)$/.exec(p)
  const payloadBytes = pm ? Number(pm[1]) : NaN
  const projectionsBytes = pm ? Number(pm[2]) : NaN
  if (!Number.isSafeInteger(payloadBytes) || !Number.isSafeInteger(projectionsBytes) || payloadBytes < 1 || projectionsBytes < 2) {
    throw bad(`header ${HEADER_PAYLOAD} is ${JSON.stringify(p)}, want "<payload bytes> <projections bytes>"`)
  }
  const incarnation = m.header?.values(HEADER_INCARNATION)[0] ?? ''
  return { token, id, incarnation, archiveId, events, lastActivity, archivedAt, jsonlSize, jsonlSha256, parts, payloadBytes, projectionsBytes, streamSeq: m.seq }
}

/** Leader get (STREAM.MSG.GET) from stream; null when there is no such message or no such stream. */
async function leaderGet(s: Store, stream: string, req: { last_by_subj: string } | { seq: number; next_by_subj: string }): Promise<StoredMsg | null> {
  try {
    return await s.jsm.streams.getMessage(stream, req)
  } catch (err) {
    if (isNoMessageFound(err) || isStreamNotFound(err)) return null
    throw err
  }
}

/** Whether this store reads archives: only under agentlog's default names (the archive stream has no other name). */
export function archivesApply(s: Store): boolean {
  return s.names.stream === STREAM_NAME
}

/** The session's archive head from the archive stream's leader; undefined when it has none. */
export async function readArchiveHead(s: Store, id: string, tok: string): Promise<ArchiveHead | undefined> {
  if (!archivesApply(s)) return undefined
  let m: StoredMsg | null
  try {
    m = await leaderGet(s, ARCHIVE_STREAM, { last_by_subj: archiveSubject(tok) })
  } catch (err) {
    throw new Error(`agentlog: session ${JSON.stringify(id)}: read the archive head ${archiveSubject(tok)}: ${(err as Error).message}`, { cause: err })
  }
  return m === null ? undefined : parseArchiveHead(id, m)
}

/** The seq of the session's first hot record (its Agentlog-First-Seq), from the leader; -1 when none. */
export async function hotFirstSeq(s: Store, id: string, tok: string): Promise<number> {
  const subject = s.subject(tok)
  let m: StoredMsg | null
  try {
    m = await leaderGet(s, s.names.stream, { seq: 1, next_by_subj: subject })
  } catch (err) {
    throw new Error(`agentlog: session ${JSON.stringify(id)}: read its first record (subject ${subject}): ${(err as Error).message}`, { cause: err })
  }
  if (m === null) return -1
  const v = m.header?.values(HEADER_FIRST_SEQ) ?? []
  const n = Number(v[0])
  if (v.length !== 1 || !/^(0|[1-9][0-9]*)$/.test(v[0]!) || !Number.isSafeInteger(n)) {
    throw new AgentlogWireError(id, -1, 'record-header', `record at stream seq ${m.seq}: header ${HEADER_FIRST_SEQ} is ${JSON.stringify(v[0] ?? '')}`)
  }
  return n
}

/**
 * Where the session's log lives, given whether it has hot records (PROTOCOL.md §13 "Where a log
 * lives"): `archive` is the archive the log uses (undefined: none, or a stale one, ignored), `hotFirst`
 * the seq of its first hot record (-1: none). Any other combination is an AgentlogWireError
 * (record-continue) naming the session and the seqs.
 */
export async function locate(s: Store, id: string, tok: string, hasHot: boolean): Promise<{ archive?: ArchiveHead; hotFirst: number }> {
  const hotFirst = hasHot ? await hotFirstSeq(s, id, tok) : -1
  if (hotFirst === 0) return { hotFirst } // an archive, if any, is stale
  const head = await readArchiveHead(s, id, tok)
  if (head === undefined) {
    if (hotFirst > 0) {
      throw new AgentlogWireError(id, 0, 'record-continue', `the hot records start at seq ${hotFirst} and no archive holds seqs 0..${hotFirst - 1}`)
    }
    return { hotFirst }
  }
  // A head with more events than the cold prefix: an archive committed since, before its purge (it holds the hot records too).
  if (hotFirst > 0 && head.events < hotFirst) {
    throw new AgentlogWireError(id, hotFirst, 'record-continue', `the hot records start at seq ${hotFirst} but the archive ${head.archiveId} holds seqs 0..${head.events - 1}`)
  }
  return { archive: head, hotFirst }
}

/** An archive read whole: its head, its packed JSONL, its events (seqs 0..n-1) and each event's line as stored. */
export interface Archived {
  head: ArchiveHead
  jsonl: Buffer
  events: WireEvent[]
  /** Each event's JSON line, UTF-8: the line of the JSONL, or for an event of a packed chunk row its expanded line. */
  lines: Buffer[]
  projections: Record<string, unknown>
}

/**
 * Read the archive of `head` whole (parts, then the head again, from the leader), check it against
 * the head, and decode its events. An archive that does not match (a missing part, a part of
 * another archive, a size or SHA-256 not the head's) is an AgentlogArchiveCorruptError naming the
 * session; an archive replaced while it was read is an Error saying so.
 */
export async function readArchive(s: Store, head: ArchiveHead): Promise<Archived> {
  const id = head.id
  const corrupt = (detail: string) => new AgentlogArchiveCorruptError(id, head.archiveId, detail)
  if (head.jsonlSize > MAX_ARCHIVE_JSONL) throw corrupt(`its JSONL is ${head.jsonlSize} bytes, above the ${MAX_ARCHIVE_JSONL} this reader holds`)
  const chunks: Uint8Array[] = []
  for (let k = 1; k < head.parts; k++) {
    const subj = archivePartSubject(head.token, head.archiveId, k)
    let m: StoredMsg | null
    try {
      m = await leaderGet(s, ARCHIVE_STREAM, { last_by_subj: subj })
    } catch (err) {
      throw new Error(`agentlog: session ${JSON.stringify(id)}: read archive part ${subj}: ${(err as Error).message}`, { cause: err })
    }
    if (m === null) throw corrupt(`part ${k} of ${head.parts} (${subj}) is missing`)
    const aid = m.header?.values(HEADER_ARCHIVE_ID) ?? []
    const part = m.header?.values(HEADER_ARCHIVE_PART) ?? []
    if (aid.length !== 1 || aid[0] !== head.archiveId || part.length !== 1 || part[0] !== String(k)) {
      throw corrupt(`part ${subj} names archive ${JSON.stringify(aid.join(','))} part ${JSON.stringify(part.join(','))}`)
    }
    chunks.push(m.data)
  }
  const hm = await leaderGet(s, ARCHIVE_STREAM, { last_by_subj: archiveSubject(head.token) })
  if (hm === null || hm.header?.get(HEADER_ARCHIVE_ID) !== head.archiveId) {
    throw new Error(`agentlog: session ${JSON.stringify(id)}: archived again or removed while it was read (archive ${head.archiveId} replaced by ${JSON.stringify(hm?.header?.get(HEADER_ARCHIVE_ID) ?? 'none')}): read it again`)
  }
  chunks.push(hm.data)
  const payload = Buffer.concat(chunks)
  if (payload.length !== head.payloadBytes) throw corrupt(`its payload is ${payload.length} bytes, its head says ${head.payloadBytes}`)
  const want = head.jsonlSize + head.projectionsBytes
  let all: Buffer
  try {
    all = zstdDecompressSync(payload, { maxOutputLength: want + 1 })
  } catch (err) {
    throw corrupt(`its payload does not decompress to the ${want} bytes its head says: ${(err as Error).message}`)
  }
  if (all.length !== want) {
    throw corrupt(`its payload holds ${all.length} bytes, its head says ${head.jsonlSize} of JSONL and ${head.projectionsBytes} of projections`)
  }
  const jsonl = all.subarray(0, head.jsonlSize)
  if (createHash('sha256').update(jsonl).digest('hex') !== head.jsonlSha256) throw corrupt(`its JSONL's SHA-256 is not its head's`)
  let projections: Record<string, unknown>
  try {
    projections = JSON.parse(all.subarray(head.jsonlSize).toString('utf8'))
  } catch (err) {
    throw corrupt(`its projections are not a JSON object: ${(err as Error).message}`)
  }
  if (typeof projections !== 'object' || projections === null || Array.isArray(projections)) throw corrupt('its projections are not a JSON object')
  const { events, lines } = decodeArchiveJSONL(head, jsonl)
  return { head, jsonl, events, lines, projections }
}

const CHUNK_ROW_TAGS = new Set(['text-chunks', 'reasoning-chunks', 'tool-call-chunks'])

/**
 * The events of an archive's packed JSONL: its header line (`{"type":"session",…}`, skipped), then
 * one event per line, or a packed chunk row (the reference's decodeStorageRecord) per line; seqs
 * 0..head.events-1 in order, or an AgentlogArchiveCorruptError.
 */
function decodeArchiveJSONL(head: ArchiveHead, jsonl: Buffer): { events: WireEvent[]; lines: Buffer[] } {
  const id = head.id
  const events: WireEvent[] = []
  const lines: Buffer[] = []
  let header = false
  let start = 0
  let lineNo = 0
  while (start < jsonl.length) {
    let end = jsonl.indexOf(0x0a, start)
    if (end < 0) end = jsonl.length
    const raw = jsonl.subarray(start, end)
    start = end + 1
    lineNo++
    const text = raw.toString('utf8')
    if (text.trim() === '') continue
    const where = `archive ${head.archiveId} line ${lineNo}`
    if (!header) {
      let v: any
      try { v = JSON.parse(text) } catch { v = undefined }
      if (typeof v !== 'object' || v === null || v.type !== 'session' || v.id !== id) {
        throw new AgentlogArchiveCorruptError(id, head.archiveId, `line ${lineNo} is not the session's header line`)
      }
      header = true
      continue
    }
    let v: any
    try { v = JSON.parse(text) } catch (err) {
      throw new AgentlogWireError(id, events.length, 'record-event', `${where} is not JSON: ${(err as Error).message}`)
    }
    if (typeof v === 'object' && v !== null && CHUNK_ROW_TAGS.has(v.type)) {
      let expanded: unknown[]
      try { expanded = decodeStorageRecord(v) as unknown[] } catch (err) {
        throw new AgentlogWireError(id, events.length, 'record-event', `${where}: ${(err as Error).message}`)
      }
      const raw = rawRowLines(text, v.type)
      for (let k = 0; k < expanded.length; k++) {
        const ev = decodeEventLine(id, JSON.stringify(expanded[k]), events.length, where)
        events.push(ev)
        // The member's line from the row's own bytes (as the Go reader expands it), when it
        // decodes to the same event; else its canonical encoding (equal values).
        const r = raw?.[k]
        let line = r !== undefined && isDeepStrictEqual(decodeEventLine(id, r, ev.seq, where), ev) ? r : undefined
        line ??= encodeEventLine(id, ev)
        lines.push(Buffer.from(line, 'utf8'))
      }
      continue
    }
    events.push(decodeEventLine(id, text, events.length, where))
    lines.push(raw)
  }
  if (!header) throw new AgentlogArchiveCorruptError(id, head.archiveId, 'its JSONL has no header line')
  if (events.length !== head.events) {
    throw new AgentlogArchiveCorruptError(id, head.archiveId, `it holds ${events.length} events, its head says ${head.events}`)
  }
  return { events, lines }
}

/**
 * The member event lines of a packed chunk row, built from the row's raw JSON pieces as Go's
 * expandChunkRow builds them (turn, step, index, id, name and each member as their bytes stand);
 * undefined when the row's shape is not one this can read (the caller then encodes the values).
 */
function rawRowLines(text: string, tag: string): string[] | undefined {
  try {
    const top = rawObject(text, skipWs(text, 0))
    const seq0 = Number(text.slice(...top.get('seq0')!))
    const time0 = Number(text.slice(...top.get('time0')!))
    const d = top.get('data')!
    const data = rawObject(text, d[0])
    const piece = (k: string) => { const r = data.get(k); return r === undefined ? undefined : text.slice(r[0], r[1]) }
    const dt = (JSON.parse(piece('dt')!) as number[])
    const arr = data.get(tag === 'tool-call-chunks' ? 'args' : 'texts')!
    const members = rawArray(text, arr[0])
    const kind = tag === 'text-chunks' ? 'text-delta' : tag === 'reasoning-chunks' ? 'reasoning-delta' : 'tool-call-delta'
    const head = `,"data":{"turn":${piece('turn')},"step":${piece('step')},"chunk":{"type":"${kind}","index":${piece('index')}`
    const mid = tag === 'tool-call-chunks'
      ? `,"id":${piece('id')}${piece('name') !== undefined ? `,"name":${piece('name')}` : ''},"argumentsDelta":`
      : ',"text":'
    const out: string[] = []
    let t = time0
    for (let k = 0; k < members.length; k++) {
      if (k > 0) t += dt[k - 1]!
      out.push(`{"type":"assistant/chunk","seq":${seq0 + k},"time":${t}${head}${mid}${text.slice(...members[k]!)}}}}`)
    }
    return out
  } catch {
    return undefined
  }
}

function skipWs(t: string, i: number): number {
  while (i < t.length && (t[i] === ' ' || t[i] === '\t' || t[i] === '\n' || t[i] === '\r')) i++
  return i
}

/** The end of the JSON value starting at i (no checks beyond its extent: JSON.parse checked it). */
function skipValue(t: string, i: number): number {
  const c = t[i]
  if (c === '"') {
    for (i++; i < t.length; i++) {
      if (t[i] === '\\') i++
      else if (t[i] === '"') return i + 1
    }
    throw new Error('unterminated string')
  }
  if (c === '{' || c === '[') {
    const close = c === '{' ? '}' : ']'
    i = skipWs(t, i + 1)
    if (t[i] === close) return i + 1
    for (;;) {
      if (c === '{') { i = skipWs(t, skipValue(t, i)); i = skipWs(t, i + 1) } // key, ':'
      i = skipWs(t, skipValue(t, i))
      if (t[i] === ',') { i = skipWs(t, i + 1); continue }
      if (t[i] === close) return i + 1
      throw new Error('bad container')
    }
  }
  let j = i
  while (j < t.length && !',}] \t\n\r'.includes(t[j]!)) j++
  if (j === i) throw new Error('empty value')
  return j
}

/** The raw [start, end) of each member of the JSON object at i, by key (the last of repeated keys). */
function rawObject(t: string, i: number): Map<string, [number, number]> {
  if (t[i] !== '{') throw new Error('not an object')
  const m = new Map<string, [number, number]>()
  i = skipWs(t, i + 1)
  if (t[i] === '}') return m
  for (;;) {
    const ke = skipValue(t, i)
    const key = JSON.parse(t.slice(i, ke)) as string
    i = skipWs(t, skipWs(t, ke) + 1)
    const ve = skipValue(t, i)
    m.set(key, [i, ve])
    i = skipWs(t, ve)
    if (t[i] === ',') { i = skipWs(t, i + 1); continue }
    if (t[i] === '}') return m
    throw new Error('bad object')
  }
}

/** The raw [start, end) of each element of the JSON array at i. */
function rawArray(t: string, i: number): [number, number][] {
  if (t[i] !== '[') throw new Error('not an array')
  const out: [number, number][] = []
  i = skipWs(t, i + 1)
  if (t[i] === ']') return out
  for (;;) {
    const e = skipValue(t, i)
    out.push([i, e])
    i = skipWs(t, e)
    if (t[i] === ',') { i = skipWs(t, i + 1); continue }
    if (t[i] === ']') return out
    throw new Error('bad array')
  }
}

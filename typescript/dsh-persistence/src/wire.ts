/**
 * agentlog's wire format (docs/PROTOCOL.md), with no NATS dependency: session id → subject token,
 * partitions, subjects, record headers and bodies, and the session metadata (KV) value. Every
 * function here mirrors the Go code of the same name in agentlog's `jetstream` package, byte for byte.
 * @module @agentlog/dsh-session-persistence/wire
 */

/** Record headers (PROTOCOL.md §4). */
export const HEADER_SESSION = 'Agentlog-Session'
export const HEADER_FIRST_SEQ = 'Agentlog-First-Seq'
export const HEADER_COUNT = 'Agentlog-Count'
export const HEADER_FORMAT = 'Agentlog-Format'
export const RECORD_FORMAT = '1'
/** A record holding offloaded events (PROTOCOL.md §4.1): format 2, one Agentlog-Blob value each. */
export const RECORD_FORMAT_BLOBS = '2'
/** A record whose offloaded events are write-once blobs of AGENTLOG_BLOBS (what is written): format 3. */
export const RECORD_FORMAT_CHUNKS = '3'
export const HEADER_BLOB = 'Agentlog-Blob'
/** NATS control headers this package sends. */
export const HEADER_MSG_ID = 'Nats-Msg-Id'
export const HEADER_EXPECTED_LAST_SUBJECT_SEQ = 'Nats-Expected-Last-Subject-Sequence'
/** Header of a session's agentlog_sessions entry: its incarnation (a random id given at create). */
export const HEADER_INCARNATION = 'Agentlog-Incarnation'
/** Header of a fork child's entry while its seed is written: the events its log must hold (PROTOCOL.md). */
export const HEADER_INCOMPLETE = 'Agentlog-Incomplete'

/** Names provisioned by `agentlog provision` / `agentlog dev` (PROTOCOL.md §2). */
export const STREAM_NAME = 'AGENTLOG'
export const SUBJECT_PREFIX = 'agentlog.session'
export const SESSIONS_BUCKET = 'agentlog_sessions'
export const PROJECTIONS_BUCKET = 'agentlog_projections'
export const WRITERS_BUCKET = 'agentlog_writers'
export const ERRORS_STREAM = 'AGENTLOG_ERRORS'
/** The Object Store bucket of offloaded events: object `<token>/<seq>/<id>` holds the event's line. */
export const BLOBS_BUCKET = 'agentlog_blobs'
/** The write-once stream of blob chunks (PROTOCOL.md §4.1): agentlog.blob.<token>.<blob id>.<chunk>. */
export const BLOB_STREAM = 'AGENTLOG_BLOBS'
export const BLOB_PREFIX = 'agentlog.blob'
/** Default cap on one event's encoded line, bytes (64 MiB), as the Go publisher's. */
export const DEFAULT_MAX_EVENT_BYTES = 64 * 1024 * 1024
export const ERRORS_PREFIX = 'agentlog.errors'
export const META_PARTITIONS = 'agentlog.partitions'
export const META_FORMAT = 'agentlog.format'
export const STORE_FORMAT = '1'
export const DEFAULT_PARTITIONS = 16
/** Longest session id, in bytes of UTF-8. */
export const MAX_SESSION_ID_BYTES = 256
/** nats-server's default limit on the messages of one atomic batch (ADR-50). */
export const MAX_BATCH_RECORDS = 1000

const utf8 = new TextEncoder()
const utf8Strict = new TextDecoder('utf-8', { fatal: true })
const HEX = '0123456789ABCDEF'

/** An error that names a session, a seq (−1: none) and a rule, like the Go side's *session.Error. */
export class AgentlogWireError extends Error {
  constructor(readonly session: string, readonly seq: number, readonly rule: string, message: string) {
    super(`agentlog: session ${JSON.stringify(session)}${seq >= 0 ? ` seq ${seq}` : ''}: ${message} (rule ${rule})`)
    this.name = 'AgentlogWireError'
  }
}

function keepByte(c: number): boolean {
  return (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39) || c === 0x2d
}

/** Check a session id: 1..256 bytes of well-formed UTF-8 (a JS string without lone surrogates). */
export function checkSessionId(id: string): Uint8Array {
  if (typeof id !== 'string' || id.length === 0) {
    throw new AgentlogWireError(String(id), -1, 'id-empty', 'the session id is empty')
  }
  if (!id.isWellFormed()) {
    throw new AgentlogWireError(id, -1, 'id-utf8', 'the session id holds a lone UTF-16 surrogate, so it is not valid UTF-8')
  }
  const bytes = utf8.encode(id)
  if (bytes.length > MAX_SESSION_ID_BYTES) {
    throw new AgentlogWireError(id.slice(0, 40), -1, 'id-too-long', `the session id is ${bytes.length} bytes, more than ${MAX_SESSION_ID_BYTES}`)
  }
  return bytes
}

/**
 * Map a session id to its subject token: bytes in [A-Za-z0-9-] are kept, every other byte of its
 * UTF-8 (including '_') becomes '_' plus two uppercase hex digits. Injective and reversible.
 */
export function token(id: string): string {
  const bytes = checkSessionId(id)
  let out = ''
  for (const c of bytes) {
    out += keepByte(c) ? String.fromCharCode(c) : '_' + HEX[c >> 4] + HEX[c & 15]
  }
  return out
}

/** Reverse {@link token}; refuses every token that {@link token} cannot produce. */
export function idFromToken(tok: string): string {
  if (tok.length === 0) throw new Error(`agentlog: subject token "": empty (rule token-canonical)`)
  const bytes: number[] = []
  for (let i = 0; i < tok.length; i++) {
    const c = tok.charCodeAt(i)
    if (keepByte(c)) { bytes.push(c); continue }
    if (c !== 0x5f) throw new Error(`agentlog: subject token ${JSON.stringify(tok)}: character at offset ${i} is not in [A-Za-z0-9_-] (rule token-canonical)`)
    const hi = HEX.indexOf(tok[i + 1] ?? 'x')
    const lo = HEX.indexOf(tok[i + 2] ?? 'x')
    if (hi < 0 || lo < 0) throw new Error(`agentlog: subject token ${JSON.stringify(tok)}: escape at offset ${i} is not '_' plus two uppercase hex digits (rule token-canonical)`)
    const v = hi << 4 | lo
    if (keepByte(v)) throw new Error(`agentlog: subject token ${JSON.stringify(tok)}: escape at offset ${i} encodes a byte that is kept unescaped (rule token-canonical)`)
    bytes.push(v)
    i += 2
  }
  let id: string
  try {
    id = utf8Strict.decode(Uint8Array.from(bytes))
  } catch {
    throw new Error(`agentlog: subject token ${JSON.stringify(tok)}: not valid UTF-8 (rule id-utf8)`)
  }
  checkSessionId(id)
  return id
}

/** FNV-1a 32-bit of the token's bytes (ASCII) modulo partitions (< 1 counts as 1). */
export function partition(tok: string, partitions: number): number {
  if (!(partitions >= 1)) partitions = 1
  let h = 0x811c9dc5
  for (let i = 0; i < tok.length; i++) {
    h ^= tok.charCodeAt(i)
    h = Math.imul(h, 0x01000193) >>> 0
  }
  return h % partitions
}

/** agentlog.session.<partition>.<token> */
export function sessionSubject(id: string, partitions: number, prefix = SUBJECT_PREFIX): string {
  const tok = token(id)
  return `${prefix}.${partition(tok, partitions)}.${tok}`
}

/** agentlog.errors.<token> */
export function errorsSubject(id: string, prefix = ERRORS_PREFIX): string {
  return `${prefix}.${token(id)}`
}

/** The event envelope this package reads and writes (structurally a dsh `SessionEvent`). */
export interface WireEvent {
  type: string
  seq: number
  time: number
  data: unknown
  surfaceOp?: unknown
  sourceEventSeqs?: unknown
  ignorable?: boolean
}

/**
 * One compact JSON line for an event, keys in the order agentlog's Go encoder writes them (type,
 * seq, time, data, sourceEventSeqs?, surfaceOp?, ignorable? only when true). Throws an error naming
 * the session, seq and type for data that JSON cannot carry.
 */
export function encodeEventLine(id: string, e: WireEvent): string {
  if (typeof e.type !== 'string' || e.type.length === 0) {
    throw new AgentlogWireError(id, e.seq, 'record-event', 'event has an empty or non-string type')
  }
  if (!Number.isSafeInteger(e.seq) || e.seq < 0) {
    throw new AgentlogWireError(id, -1, 'record-seq', `event "${e.type}" has seq ${String(e.seq)}, not a non-negative safe integer`)
  }
  if (typeof e.time !== 'number' || !Number.isFinite(e.time)) {
    throw new AgentlogWireError(id, e.seq, 'record-event', `event "${e.type}" has time ${String(e.time)}, not a finite number`)
  }
  const d = e.data as { toJSON?: unknown } | undefined
  // JSON.stringify would drop the key of data that has no JSON form; refuse it instead.
  if (d === undefined || typeof d === 'function' || typeof d === 'symbol'
    || (typeof d === 'object' && d !== null && typeof d.toJSON === 'function' && JSON.stringify(d) === undefined)) {
    throw new AgentlogWireError(id, e.seq, 'record-event', `event "${e.type}" carries data that is not losslessly JSON-serializable`)
  }
  // One JSON.stringify of a fresh object whose keys are in wire order: a flat string, no ropes.
  const o: Record<string, unknown> = { type: e.type, seq: e.seq, time: e.time, data: d }
  if (e.sourceEventSeqs !== undefined) o.sourceEventSeqs = e.sourceEventSeqs
  if (e.surfaceOp !== undefined) o.surfaceOp = e.surfaceOp
  if (e.ignorable === true) o.ignorable = true
  try {
    return JSON.stringify(o)
  } catch (err) {
    throw new AgentlogWireError(id, e.seq, 'record-event', `event "${e.type}" cannot be encoded as JSON: ${(err as Error).message}`)
  }
}

/** Check that events are non-empty with consecutive seqs; returns their lines. */
export function encodeLines(id: string, events: readonly WireEvent[]): string[] {
  if (events.length === 0) throw new AgentlogWireError(id, -1, 'record-empty', 'no events to encode')
  const lines = new Array<string>(events.length)
  for (let i = 0; i < events.length; i++) {
    const e = events[i]!
    if (i > 0 && e.seq !== events[i - 1]!.seq + 1) {
      throw new AgentlogWireError(id, e.seq, 'record-seq', `follows seq ${events[i - 1]!.seq} in the same batch; seqs must be consecutive`)
    }
    lines[i] = encodeEventLine(id, e)
  }
  return lines
}

/** Record headers for a record of `count` events from `firstSeq` (no Nats-* header). */
export function recordHeaders(tok: string, firstSeq: number, count: number): [string, string][] {
  return [
    [HEADER_SESSION, tok],
    [HEADER_FIRST_SEQ, String(firstSeq)],
    [HEADER_COUNT, String(count)],
    [HEADER_FORMAT, RECORD_FORMAT],
  ]
}

/** Bytes a NATS header block takes on the wire ("NATS/1.0\r\n", "k: v\r\n" each, "\r\n"). */
export function headerWireSize(h: readonly (readonly [string, string])[]): number {
  if (h.length === 0) return 0
  let n = 'NATS/1.0\r\n'.length + 2
  for (const [k, v] of h) n += utf8Length(k) + utf8Length(v.trim()) + 4
  return n
}

/** Bytes of the string's UTF-8 encoding (a lone surrogate counts as U+FFFD, 3 bytes, as TextEncoder writes it). */
export function utf8Length(s: string): number {
  let n = s.length
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c < 0x80) continue
    if (c < 0x800) n += 1
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) { n += 2; i++ }
    else n += 2
  }
  return n
}

/** What a record's headers say, read back. */
export interface RecordInfo { session: string; firstSeq: number; count: number }

/** A header lookup: the values of one key (NATS headers can repeat a key). */
export type HeaderValues = (key: string) => string[]

function single(values: HeaderValues, key: string, id: string, streamSeq: number): string {
  const vs = values(key)
  if (vs.length === 1) return vs[0]!
  throw new AgentlogWireError(id, -1, 'record-header', `record at stream seq ${streamSeq}: header ${key} has ${vs.length} values, want 1`)
}

/**
 * An offloaded event: its seq, the size (bytes) and SHA-256 (hex) of its line, its blob's id and
 * chunk count (format 3: a blob of AGENTLOG_BLOBS). A legacy ref (format 2) has no chunks: its id
 * is the nuid of an object of the Object Store bucket agentlog_blobs.
 */
export interface BlobRef { seq: number; size: number; sha256: string; id: string; chunks?: number }

/** The Agentlog-Blob header value of a ref: "<seq> <size> <sha256 hex> <id> <chunks>" (legacy: no chunks). */
export function blobHeaderValue(ref: BlobRef): string {
  const v = `${ref.seq} ${ref.size} ${ref.sha256} ${ref.id}`
  return ref.chunks === undefined ? v : `${v} ${ref.chunks}`
}

/** The object name of a legacy ref in agentlog_blobs: "<token>/<seq>/<id>". */
export function blobName(tok: string, ref: BlobRef): string {
  return `${tok}/${ref.seq}/${ref.id}`
}

/** The subject of chunk k of blob id of session token tok: "agentlog.blob.<tok>.<id>.<k>". */
export function blobChunkSubject(tok: string, id: string, k: number, prefix = BLOB_PREFIX): string {
  return `${prefix}.${tok}.${id}.${k}`
}

/** The subject filter of every chunk of blob id: "agentlog.blob.<tok>.<id>.*". */
export function blobChunksFilter(tok: string, id: string, prefix = BLOB_PREFIX): string {
  return `${prefix}.${tok}.${id}.*`
}

/** Parse an Agentlog-Blob value of a record of format fmt (2: legacy, 3: chunks); null when it is not canonical. */
export function parseBlobRef(v: string, fmt: string = RECORD_FORMAT_BLOBS): BlobRef | null {
  const m = fmt === RECORD_FORMAT_CHUNKS
    ? /^(0|[1-9][0-9]*) ([1-9][0-9]*) ([0-9a-f]{64}) ([0-9a-f]{32}) ([1-9][0-9]*)$/.exec(v)
    : /^(0|[1-9][0-9]*) ([1-9][0-9]*) ([0-9a-f]{64}) ([0-9A-Za-z]{1,64})$/.exec(v)
  if (m === null) return null
  const seq = Number(m[1])
  const size = Number(m[2])
  if (!Number.isSafeInteger(seq) || !Number.isSafeInteger(size)) return null
  if (fmt !== RECORD_FORMAT_CHUNKS) return { seq, size, sha256: m[3]!, id: m[4]! }
  const chunks = Number(m[5])
  if (!Number.isSafeInteger(chunks) || chunks > size) return null
  return { seq, size, sha256: m[3]!, id: m[4]!, chunks }
}

/**
 * Decode one event line of a record (or of a blob) that must hold seq `want`: a JSON object with
 * type, seq, time and data. The event is a fresh object, keys in wire order.
 */
export function decodeEventLine(id: string, line: string, want: number, where: string): WireEvent {
  let v: any
  try { v = JSON.parse(line) } catch (err) {
    throw new AgentlogWireError(id, want, 'record-event', `${where} is not JSON: ${(err as Error).message}`)
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v) || typeof v.type !== 'string' || v.type === ''
    || typeof v.time !== 'number' || !Object.hasOwn(v, 'data')) {
    throw new AgentlogWireError(id, want, 'record-event', `${where} lacks one of type, seq, time, data`)
  }
  if (v.seq !== want) {
    throw new AgentlogWireError(id, want, 'record-seq', `${where} has seq ${String(v.seq)}, want ${want}`)
  }
  const ev: WireEvent = { type: v.type, seq: v.seq, time: v.time, data: v.data }
  if (v.surfaceOp !== undefined) ev.surfaceOp = v.surfaceOp
  if (v.sourceEventSeqs !== undefined) ev.sourceEventSeqs = v.sourceEventSeqs
  if (v.ignorable === true) ev.ignorable = true
  return ev
}

/**
 * Decode a stored record: checks Agentlog-Format, Agentlog-Session (a canonical token), decimal
 * First-Seq ≥ 0 and Count ≥ 1, Count lines, and consecutive seqs from First-Seq. Nats-* headers
 * are ignored. The events are fresh objects, keys in wire order. A record of format 2 names its
 * offloaded events in `blobs` (their lines are empty); their places in `events` hold placeholders
 * until the caller reads the blobs (see the backend's resolve) and puts the events there.
 */
export function decodeRecord(values: HeaderValues, body: string, streamSeq: number): { info: RecordInfo; events: WireEvent[]; blobs: { index: number; ref: BlobRef }[] } {
  const tok = single(values, HEADER_SESSION, '?', streamSeq)
  let id: string
  try { id = idFromToken(tok) } catch (err) {
    throw new AgentlogWireError(tok, -1, 'record-session', `record at stream seq ${streamSeq}: header ${HEADER_SESSION}: ${(err as Error).message}`)
  }
  const fmt = single(values, HEADER_FORMAT, id, streamSeq)
  if (fmt !== RECORD_FORMAT && fmt !== RECORD_FORMAT_BLOBS && fmt !== RECORD_FORMAT_CHUNKS) {
    throw new AgentlogWireError(id, -1, 'record-format', `record at stream seq ${streamSeq}: header ${HEADER_FORMAT} is ${JSON.stringify(fmt)}, this code reads "${RECORD_FORMAT}", "${RECORD_FORMAT_BLOBS}" and "${RECORD_FORMAT_CHUNKS}"`)
  }
  const fs = single(values, HEADER_FIRST_SEQ, id, streamSeq)
  const first = Number(fs)
  if (!/^(0|[1-9][0-9]*)$/.test(fs) || !Number.isSafeInteger(first)) {
    throw new AgentlogWireError(id, -1, 'record-header', `record at stream seq ${streamSeq}: header ${HEADER_FIRST_SEQ} is ${JSON.stringify(fs)}, want a decimal integer ≥ 0`)
  }
  const cs = single(values, HEADER_COUNT, id, streamSeq)
  const count = Number(cs)
  if (!/^[1-9][0-9]*$/.test(cs) || !Number.isSafeInteger(count)) {
    throw new AgentlogWireError(id, first, 'record-header', `record at stream seq ${streamSeq}: header ${HEADER_COUNT} is ${JSON.stringify(cs)}, want a decimal integer ≥ 1`)
  }
  const refs: BlobRef[] = []
  const blobValues = values(HEADER_BLOB)
  if ((blobValues.length > 0) !== (fmt !== RECORD_FORMAT)) {
    throw new AgentlogWireError(id, -1, 'record-format', `record at stream seq ${streamSeq}: format ${JSON.stringify(fmt)} with ${blobValues.length} ${HEADER_BLOB} headers (formats "${RECORD_FORMAT_CHUNKS}" and "${RECORD_FORMAT_BLOBS}" name offloaded events, format "${RECORD_FORMAT}" none)`)
  }
  for (const v of blobValues) {
    const ref = parseBlobRef(v, fmt)
    if (ref === null) {
      const shape = fmt === RECORD_FORMAT_CHUNKS ? '<seq> <size> <sha256 hex> <id> <chunks>' : '<seq> <size> <sha256 hex> <id>'
      throw new AgentlogWireError(id, first, 'record-header', `record at stream seq ${streamSeq}: header ${HEADER_BLOB} value ${JSON.stringify(v)}, want "${shape}" (format ${fmt})`)
    }
    if (ref.seq < first || ref.seq >= first + count || (refs.length > 0 && ref.seq <= refs[refs.length - 1]!.seq)) {
      throw new AgentlogWireError(id, ref.seq, 'record-header', `record at stream seq ${streamSeq}: header ${HEADER_BLOB} names seq ${ref.seq}, out of order or outside the record's seqs ${first}..${first + count - 1}`)
    }
    refs.push(ref)
  }
  const lines = body.length === 0 && refs.length === 0 ? [] : body.split('\n')
  if (lines.length !== count) {
    throw new AgentlogWireError(id, first, 'record-count', `record at stream seq ${streamSeq}: header ${HEADER_COUNT} is ${count} but the body has ${lines.length} lines`)
  }
  const events = new Array<WireEvent>(count)
  const blobs: { index: number; ref: BlobRef }[] = []
  for (let i = 0; i < count; i++) {
    const want = first + i
    const ref = refs[blobs.length]
    if (lines[i] === '' && ref !== undefined && ref.seq === want) {
      blobs.push({ index: i, ref })
      events[i] = { type: '', seq: want, time: 0, data: null } // a placeholder: the blob holds the event
      continue
    }
    events[i] = decodeEventLine(id, lines[i]!, want, `record at stream seq ${streamSeq}: line ${i + 1}`)
  }
  if (blobs.length !== refs.length) {
    throw new AgentlogWireError(id, refs[blobs.length]!.seq, 'record-blob', `record at stream seq ${streamSeq}: header ${HEADER_BLOB} names seq ${refs[blobs.length]!.seq}, but its line is not empty`)
  }
  return { info: { session: id, firstSeq: first, count }, events, blobs }
}

/** The dsh session header fields agentlog stores (a dsh `SessionHeader`). */
export interface WireHeader {
  version: number
  id: string
  createdAt: number
  cwd?: string
  parentSession?: string
  seedLength?: number
  origin?: string
  delegationDepth?: number
  agentPreset?: string
}

/**
 * The KV value of a session: its dsh JSONL header line (no newline), fields in the reference's
 * order, `delegationDepth` always written (default 0) as the reference's JSONL backend does.
 */
export function headerLine(h: WireHeader): string {
  return JSON.stringify({
    type: 'session',
    version: h.version,
    id: h.id,
    createdAt: h.createdAt,
    ...h.cwd !== undefined ? { cwd: h.cwd } : {},
    ...h.parentSession !== undefined ? { parentSession: h.parentSession } : {},
    ...h.seedLength !== undefined ? { seedLength: h.seedLength } : {},
    ...h.origin !== undefined ? { origin: h.origin } : {},
    delegationDepth: h.delegationDepth ?? 0,
    ...h.agentPreset !== undefined ? { agentPreset: h.agentPreset } : {},
  })
}

/**
 * Parse a KV header value back into a dsh header. Fields absent from the stored line stay absent,
 * except `delegationDepth`, which dsh requires (the Go stack omits it when unset: 0).
 */
export function parseHeaderLine(id: string, value: string): WireHeader {
  let v: any
  try { v = JSON.parse(value) } catch (err) {
    throw new AgentlogWireError(id, -1, 'header', `the metadata in ${SESSIONS_BUCKET} is not JSON: ${(err as Error).message}`)
  }
  if (typeof v !== 'object' || v === null || v.type !== 'session' || typeof v.id !== 'string') {
    throw new AgentlogWireError(id, -1, 'header', `the metadata in ${SESSIONS_BUCKET} is not a session header line`)
  }
  if (v.id !== id) {
    throw new AgentlogWireError(id, -1, 'header', `the metadata in ${SESSIONS_BUCKET} names session ${JSON.stringify(v.id)}`)
  }
  const h: WireHeader = {
    version: typeof v.version === 'number' ? v.version : 0,
    id: v.id,
    createdAt: typeof v.createdAt === 'number' ? v.createdAt : 0,
  }
  if (typeof v.cwd === 'string') h.cwd = v.cwd
  if (typeof v.parentSession === 'string') h.parentSession = v.parentSession
  if (typeof v.seedLength === 'number') h.seedLength = v.seedLength
  if (typeof v.origin === 'string') h.origin = v.origin
  h.delegationDepth = typeof v.delegationDepth === 'number' ? v.delegationDepth : 0
  if (typeof v.agentPreset === 'string') h.agentPreset = v.agentPreset
  return h
}

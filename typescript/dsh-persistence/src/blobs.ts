/**
 * Offloaded events (PROTOCOL.md §4.1): an event too large for any record is stored as a blob of
 * the write-once stream AGENTLOG_BLOBS (chunks on agentlog.blob.<token>.<blob id>.<k>), its record
 * (format 3) naming it; reading a record reads its blobs back by direct gets, chunk count, size
 * and SHA-256 checked. Legacy records (format 2) name objects of the Object Store bucket
 * agentlog_blobs: read with direct gets too, never written.
 */
import { createHash, randomBytes } from 'node:crypto'
import { headers as natsHeaders } from '@nats-io/transport-node'
import type { EncodedLines } from './encoder.js'
import { isWrongLastSequence } from './errors.js'
import type { Store } from './store.js'
import {
  AgentlogWireError, HEADER_EXPECTED_LAST_SUBJECT_SEQ, blobChunkSubject, blobChunksFilter, blobName, decodeEventLine,
  type BlobRef, type decodeRecord, type WireEvent,
} from './wire.js'

/** A record as decodeRecord gives it: its offloaded events not yet read. */
export type DecodedRecord = ReturnType<typeof decodeRecord>

/** A record is published only while its blobs are younger than this, ms (jetstream.BlobMaxAgeAtPublish). */
export const BLOB_MAX_AGE_AT_PUBLISH_MS = 5 * 60_000

/** An offloaded event: its index in the batch, and its ref. */
export interface Offloaded { index: number; ref: BlobRef }

/** How often one chunk whose ack did not come is sent (store/blob.go putChunkTries). */
const PUT_CHUNK_TRIES = 3

/** A blob that is missing or differs: the log's fault (rule record-blob). */
class BlobFault extends Error {}

/**
 * Read chunks of `filter` from `stream` by batched direct gets (next_by_subj, stream order) into
 * put, until `want` were read or none is left; returns how many it read.
 */
async function readChunks(s: Store, stream: string, filter: string, want: number, put: (subject: string, data: Uint8Array) => void): Promise<number> {
  let n = 0
  let from = 1
  while (n < want) {
    let got = 0
    try {
      const iter = await s.jsm.direct.getBatch(stream, { seq: from, next_by_subj: filter, batch: want - n })
      for await (const m of iter) {
        got++
        n++
        from = m.seq + 1
        put(m.subject, m.data)
      }
    } catch (err) {
      // The server answers 404 when nothing matches from `from` on: no chunk (left).
      if (err instanceof BlobFault || !/message not found|no message found/i.test((err as Error).message)) throw err
    }
    if (got === 0) break
  }
  return n
}

/** The line of a format 3 ref, its chunks read from AGENTLOG_BLOBS and checked. */
async function readBlob(s: Store, tok: string, ref: BlobRef): Promise<Uint8Array> {
  const chunks = ref.chunks!
  const filter = blobChunksFilter(tok, ref.id, s.names.blobPrefix)
  const parts = new Array<Uint8Array | undefined>(chunks)
  const base = filter.slice(0, -1)
  await readChunks(s, s.names.blobStream, filter, chunks, (subject, data) => {
    const k = Number(subject.slice(base.length))
    if (!subject.startsWith(base) || !/^(0|[1-9][0-9]*)$/.test(subject.slice(base.length)) || k >= chunks) {
      throw new BlobFault(`it has chunk ${subject}, beyond the ${chunks} its record names`)
    }
    parts[k] ??= data
  })
  const missing = parts.findIndex(p => p === undefined)
  if (missing >= 0) throw new BlobFault(`chunk ${missing} of ${chunks} is missing`)
  return Buffer.concat(parts as Uint8Array[])
}

/** The line of a legacy ref, from the Object Store bucket: its metadata and chunks by direct gets (no consumer). */
async function readLegacyBlob(s: Store, tok: string, ref: BlobRef): Promise<Uint8Array> {
  const bucket = s.names.blobsBucket
  const stream = `OBJ_${bucket}`
  const meta = await s.jsm.direct.getMessage(stream, { last_by_subj: `$O.${bucket}.M.${b64url(Buffer.from(blobName(tok, ref), 'utf8'))}` })
  if (meta === null) throw new BlobFault('it is missing')
  let info: { nuid?: string; chunks?: number; deleted?: boolean }
  try { info = meta.json() } catch (err) { throw new BlobFault(`its metadata is not an object's: ${(err as Error).message}`) }
  if (info.deleted === true || typeof info.nuid !== 'string' || info.nuid === '') throw new BlobFault('it is missing (deleted)')
  const want = info.chunks ?? 0
  const parts: Uint8Array[] = []
  const n = await readChunks(s, stream, `$O.${bucket}.C.${info.nuid}`, want, (_, data) => { parts.push(data) })
  if (n !== want) throw new BlobFault(`${n} of its ${want} chunks are there`)
  return Buffer.concat(parts)
}

/**
 * The events of a decoded record with its offloaded events read (format 3: AGENTLOG_BLOBS;
 * format 2: the legacy bucket agentlog_blobs), their chunk count, size and SHA-256 checked
 * against the record's Agentlog-Blob values. A blob that is missing or differs is an
 * AgentlogWireError (rule record-blob) naming the session and the seq.
 */
export async function resolveBlobs(s: Store, id: string, tok: string, dec: DecodedRecord, streamSeq: number): Promise<WireEvent[]> {
  if (dec.blobs.length === 0) return dec.events
  for (const { index, ref } of dec.blobs) {
    const legacy = ref.chunks === undefined
    const name = legacy ? `${blobName(tok, ref)} in ${s.names.blobsBucket}` : `${blobChunksFilter(tok, ref.id, s.names.blobPrefix)} in ${s.names.blobStream}`
    const where = `record at stream seq ${streamSeq}: the event's blob ${name}`
    let bytes: Uint8Array
    try {
      bytes = legacy ? await readLegacyBlob(s, tok, ref) : await readBlob(s, tok, ref)
    } catch (err) {
      if (err instanceof BlobFault) throw new AgentlogWireError(id, ref.seq, 'record-blob', `${where}: ${err.message}`)
      throw new Error(`agentlog: session ${JSON.stringify(id)} seq ${ref.seq}: ${where} cannot be read: ${(err as Error).message}`, { cause: err })
    }
    if (bytes.length !== ref.size || createHash('sha256').update(bytes).digest('hex') !== ref.sha256) {
      throw new AgentlogWireError(id, ref.seq, 'record-blob', `${where} is ${bytes.length} bytes with another SHA-256 than its record names (${ref.size} bytes)`)
    }
    dec.events[index] = decodeEventLine(id, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8'), ref.seq, where)
  }
  return dec.events
}

/** A fresh blob id: 128 bits of randomness as 32 lowercase hex digits (no one can guess its subjects). */
export function newBlobId(): string {
  return randomBytes(16).toString('hex')
}

/** A publish whose outcome is unknown (no ack in time, no responders). */
function lostAck(err: unknown): boolean {
  const name = (err as { name?: string; code?: string }).name ?? ''
  const msg = (err as Error).message ?? ''
  return /timeout|TimeoutError|no responders|503/i.test(`${name} ${msg}`)
}

/**
 * Store one chunk on its subject, create-only (Nats-Expected-Last-Subject-Sequence: 0); a chunk
 * whose ack is lost is sent again, and one the stream holds already counts as written when the
 * stored bytes are the same (else an Error: the subject is taken).
 */
async function putChunk(s: Store, subject: string, part: Uint8Array): Promise<void> {
  for (let tryNo = 1; ; tryNo++) {
    const h = natsHeaders()
    h.set(HEADER_EXPECTED_LAST_SUBJECT_SEQ, '0')
    try {
      await s.js.publish(subject, part, { headers: h })
      return
    } catch (err) {
      if (isWrongLastSequence(err)) {
        const m = await s.jsm.direct.getMessage(s.names.blobStream, { last_by_subj: subject })
        if (m !== null && Buffer.from(m.data).equals(Buffer.from(part))) return
        throw new Error(`blob chunk subject ${subject} already holds other bytes`, { cause: err })
      }
      if (tryNo === PUT_CHUNK_TRIES || !lostAck(err)) throw err
    }
  }
}
const b64url = (b: Buffer) => b.toString('base64').replace(/\+/g, '-').replace(/\//g, '_')

/**
 * Store the lines of events too large for any record of this window as blobs (new objects,
 * PROTOCOL.md §4.1) and return them with the lines left empty; an event over maxEventBytes is
 * refused first, so nothing is stored for a refused batch. budget is the body bytes a record
 * of the window holds.
 */
export async function offload(s: Store, id: string, tok: string, events: readonly WireEvent[], lines: EncodedLines, budget: number, maxEventBytes: number): Promise<{ lines: EncodedLines; blobs: Offloaded[] }> {
  const big: number[] = []
  for (let i = 0; i < lines.length; i++) {
    const len = lines.bytes(i)
    if (len <= budget && len <= maxEventBytes) continue
    if (len > maxEventBytes) {
      throw new AgentlogWireError(id, events[i]!.seq, 'event-too-large', `the event is ${len} bytes encoded, the max event size is ${maxEventBytes} bytes (maxEventBytes)`)
    }
    if (len > budget) big.push(i)
  }
  if (big.length === 0) return { lines, blobs: [] }
  const chunk = Math.max(Math.min(128 * 1024, s.maxPayload - 1024), 512)
  const blobs: Offloaded[] = []
  for (const i of big) {
    const bytes = lines.line(i)
    const sum = createHash('sha256').update(bytes).digest()
    const chunks = Math.ceil(bytes.length / chunk)
    const ref: BlobRef = { seq: events[i]!.seq, size: bytes.length, sha256: sum.toString('hex'), id: newBlobId(), chunks }
    try {
      // Each chunk is a new subject of the write-once stream; nothing is purged on failure (no
      // writer may purge: a purge's filter is in its payload). The operator's blob GC removes
      // the chunks of a failed upload.
      const window = 32
      for (let k = 0; k < chunks; k += window) {
        const sends: Promise<void>[] = []
        for (let j = k; j < Math.min(k + window, chunks); j++) {
          sends.push(putChunk(s, blobChunkSubject(tok, ref.id, j, s.names.blobPrefix), bytes.subarray(j * chunk, (j + 1) * chunk)))
        }
        await Promise.all(sends)
      }
    } catch (err) {
      throw new Error(`agentlog: session ${JSON.stringify(id)} seq ${ref.seq}: store the event's ${ref.size} bytes as blob ${ref.id} in ${s.names.blobStream}: ${(err as Error).message}`, { cause: err })
    }
    blobs.push({ index: i, ref })
  }
  return { lines: lines.emptied(big), blobs }
}

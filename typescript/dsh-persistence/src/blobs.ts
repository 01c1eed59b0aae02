/**
 * Offloaded events (PROTOCOL.md §4.1): an event too large for any record is stored as an object of
 * the Object Store bucket agentlog_blobs, its record naming it; reading a record reads its blobs
 * back, size and SHA-256 checked.
 */
import { createHash } from 'node:crypto'
import { headers as natsHeaders, nuid } from '@nats-io/transport-node'
import { Objm, type ObjectStore } from '@nats-io/obj'
import type { EncodedLines } from './encoder.js'
import type { Store } from './store.js'
import { AgentlogWireError, blobName, decodeEventLine, type BlobRef, type decodeRecord, type WireEvent } from './wire.js'

/** A record as decodeRecord gives it: its offloaded events not yet read. */
export type DecodedRecord = ReturnType<typeof decodeRecord>

/** A record is published only while its blobs are younger than this, ms (jetstream.BlobMaxAgeAtPublish). */
export const BLOB_MAX_AGE_AT_PUBLISH_MS = 5 * 60_000

/** An offloaded event: its index in the batch, and its ref. */
export interface Offloaded { index: number; ref: BlobRef }

/** agentlog_blobs, opened once per store (opened again after a failure). */
function blobStore(s: Store): Promise<ObjectStore> {
  s.blobs ??= new Objm(s.js).open(s.names.blobsBucket).catch((err: unknown) => {
    s.blobs = undefined
    throw new Error(`Object Store bucket ${s.names.blobsBucket} (offloaded events) does not exist or cannot be read (run \`agentlog provision\`): ${(err as Error).message}`, { cause: err })
  })
  return s.blobs
}

/**
 * The events of a decoded record with its offloaded events read from agentlog_blobs (their
 * size and SHA-256 checked against the record's Agentlog-Blob values). A blob that is missing
 * or differs is an AgentlogWireError (rule record-blob) naming the session and the seq.
 */
export async function resolveBlobs(s: Store, id: string, tok: string, dec: DecodedRecord, streamSeq: number): Promise<WireEvent[]> {
  if (dec.blobs.length === 0) return dec.events
  const os = await blobStore(s)
  for (const { index, ref } of dec.blobs) {
    const name = blobName(tok, ref)
    const where = `record at stream seq ${streamSeq}: the event's blob ${name} in ${s.names.blobsBucket}`
    let bytes: Uint8Array | null
    try {
      bytes = await os.getBlob(name)
    } catch (err) {
      throw new AgentlogWireError(id, ref.seq, 'record-blob', `${where} cannot be read: ${(err as Error).message}`)
    }
    if (bytes === null) throw new AgentlogWireError(id, ref.seq, 'record-blob', `${where} is missing`)
    if (bytes.length !== ref.size || createHash('sha256').update(bytes).digest('hex') !== ref.sha256) {
      throw new AgentlogWireError(id, ref.seq, 'record-blob', `${where} is ${bytes.length} bytes with another digest than its record names (${ref.size} bytes)`)
    }
    dec.events[index] = decodeEventLine(id, Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length).toString('utf8'), ref.seq, where)
  }
  return dec.events
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
  await blobStore(s) // the bucket exists (else a clear error)
  const bucket = s.names.blobsBucket
  const chunk = Math.max(Math.min(128 * 1024, s.maxPayload - 1024), 512)
  const blobs: Offloaded[] = []
  for (const i of big) {
    const bytes = lines.line(i)
    const sum = createHash('sha256').update(bytes).digest()
    const ref: BlobRef = { seq: events[i]!.seq, size: bytes.length, sha256: sum.toString('hex'), id: nuid.next() }
    const name = blobName(tok, ref)
    try {
      // The chunks, then the object's metadata, as @nats-io/obj's put writes an object (ADR-20),
      // without its purge of a failed put's chunks: agents may not purge the bucket (a purge
      // could take every session's blobs), and that refusal would replace this error. The
      // projector's blob GC removes such chunks.
      const obj = nuid.next()
      for (let off = 0; off < bytes.length; off += chunk) await s.js.publish(`$O.${bucket}.C.${obj}`, bytes.subarray(off, off + chunk))
      const info = {
        name, options: { max_chunk_size: chunk }, bucket, nuid: obj, size: bytes.length, chunks: Math.ceil(bytes.length / chunk),
        mtime: new Date().toISOString(), digest: `SHA-256=${b64url(sum)}`, deleted: false,
      }
      const h = natsHeaders()
      h.set('Nats-Rollup', 'sub')
      await s.js.publish(`$O.${bucket}.M.${b64url(Buffer.from(name, 'utf8'))}`, JSON.stringify(info), { headers: h })
    } catch (err) {
      throw new Error(`agentlog: session ${JSON.stringify(id)} seq ${ref.seq}: store the event's ${ref.size} bytes as blob ${name} in ${bucket}: ${(err as Error).message}`, { cause: err })
    }
    blobs.push({ index: i, ref })
  }
  return { lines: lines.emptied(big), blobs }
}

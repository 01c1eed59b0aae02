/**
 * The write path (PROTOCOL.md §5–§6): a session's metadata create, its writer lease, and each batch
 * as one guarded record (an atomic batch of records when too big, offloaded events first), a lost
 * ack, dedupe or guard conflict resolved by reading the tail.
 */
import { nuid } from '@nats-io/transport-node'
import type { PubAck } from '@nats-io/jetstream'
import type { SessionHeader } from '@deepseek-ai/dsh-session'
import { headersOf } from './ackmux.js'
import { readArchiveHead, readArchive, restoreMsgId, type Archived } from './archive.js'
import { BLOB_MAX_AGE_AT_PUBLISH_MS, offload, type Offloaded } from './blobs.js'
import { EncodedLines } from './encoder.js'
import { AgentlogAckedLostError, AgentlogConflictError, isBatchDuplicateMsgId, isWrongLastSequence } from './errors.js'
import { Leases } from './lease.js'
import { fieldBytes, type AgentlogMetrics } from './metrics.js'
import type { Store, Tail } from './store.js'
import {
  AgentlogWireError, HEADER_BLOB, HEADER_EXPECTED_LAST_SUBJECT_SEQ, HEADER_FORMAT, HEADER_INCARNATION, HEADER_MSG_ID,
  MAX_BATCH_RECORDS, RECORD_FORMAT_CHUNKS, blobHeaderValue, headerLine, headerWireSize, recordHeaders, token,
  type BlobRef, type WireEvent,
} from './wire.js'

/** What one writer knows of the sessions it writes: their tails and incarnations, and its leases. */
export class Writer {
  /** Each session's tail as this writer last acknowledged or read it: the next guard. */
  private readonly tails = new Map<string, Tail>()
  /** Each session's connection generation (Store.conn.gen) when its tail was last proved or read. */
  private readonly provedGen = new Map<string, number>()
  /** Sessions whose tail must be proved before the next write (a failed write, a lease taken again). */
  private readonly unproved = new Set<string>()
  /** Each session's incarnation (its metadata entry's Agentlog-Incarnation header; "" for legacy). */
  private readonly incarnations = new Map<string, string>()
  readonly leases: Leases
  /** The opt-in metrics (config.metrics), or undefined. */
  metrics?: AgentlogMetrics

  /** writerId prefixes the Nats-Msg-Id values; maxEventBytes caps one event's line; leaseTtlMs > 0 takes leases. */
  constructor(private readonly writerId: string, private readonly maxEventBytes: number, leaseTtlMs: number) {
    this.leases = new Leases(writerId, leaseTtlMs)
  }

  /** The session's incarnation, as its metadata entry read now holds it. */
  loadedIncarnation(id: string, incarnation: string): void {
    this.incarnations.set(id, incarnation)
  }

  /** Archived sessions as a read found them (no hot record): a write restores them first. */
  private readonly archives = new Map<string, Archived>()

  /** The session's archive, as a read found it (undefined: the session's log is not archived). */
  loadedArchive(id: string, archived: Archived | undefined): void {
    if (archived === undefined) this.archives.delete(id)
    else this.archives.set(id, archived)
  }

  /**
   * The session's tail, as a read found it (undefined: the session has no record); gen is the
   * connection generation the read began at.
   */
  loadedTail(id: string, tail: Tail | undefined, gen: number): void {
    if (tail === undefined) this.tails.delete(id)
    else this.tails.set(id, tail)
    this.provedGen.set(id, gen)
    this.unproved.delete(id)
  }

  /** The Nats-Msg-Id of the record starting at firstSeq (PROTOCOL.md §5.2). */
  private msgIdOf(id: string, tok: string, firstSeq: number): string {
    const inc = this.incarnations.get(id) ?? ''
    return inc === '' ? `${this.writerId}.${tok}.${firstSeq}` : `${this.writerId}.${tok}.${inc}.${firstSeq}`
  }

  /**
   * Append events (consecutive seqs, encoded as lines) to the session: for a session not yet
   * materialized, create its metadata first (events must start at seq 0). A failure is also
   * reported on the errors stream.
   */
  async append(s: Store, meta: SessionHeader, events: readonly WireEvent[], isMaterialized: boolean, lines: EncodedLines): Promise<void> {
    const id = meta.id
    const first = events[0]!.seq
    const last = events[events.length - 1]!.seq
    const tok = token(id)
    const started = Date.now()
    try {
      let tail: Tail
      if (!isMaterialized) {
        if (first !== 0) {
          throw new AgentlogWireError(id, first, 'record-continue', 'the first record of a session must start at seq 0')
        }
        // The metadata create and the lease take one round trip together; a lease taken for a
        // session whose create is refused is given back at once.
        const [m, l] = await Promise.allSettled([this.createMeta(s, meta, tok), this.leases.ensure(s, id, tok, first, last)])
        if (m.status === 'rejected') {
          if (l.status === 'fulfilled') await this.leases.drop(s, id, tok)
          throw m.reason
        }
        if (l.status === 'rejected') throw l.reason
        tail = { streamSeq: 0, nextSeq: 0, msgId: '' }
        this.proved(id, s.conn.gen) // guard 0 needs no proof: it fails on any record
      } else {
        // A lease taken again (released when idle, or never held): another writer may have
        // written since; the tail is proved before the write.
        if (await this.leases.ensure(s, id, tok, first, last)) this.unproved.add(id)
        if (!this.incarnations.has(id)) this.incarnations.set(id, (await s.readMeta(tok))?.incarnation ?? '')
        const gen = s.conn.gen
        const cached = this.tails.get(id)
        if (cached !== undefined) {
          tail = cached
        } else {
          tail = await s.leaderTail(id, tok)
          this.proved(id, gen)
        }
        if (tail.streamSeq === 0) {
          // No hot record: an archived session is restored first (PROTOCOL.md §13); the
          // restore's records are guarded with 0 and acked: its tail needs no proof.
          tail = await this.restore(s, id, tok)
          if (tail.streamSeq !== 0) this.proved(id, gen)
        }
      }
      if (tail.nextSeq !== first) {
        throw new AgentlogConflictError(id, first, last, tail.streamSeq,
          `the stored log's next seq is ${tail.nextSeq}, not ${first}`)
      }
      let records: number
      try {
        records = await this.write(s, id, tok, tail, events, lines)
      } catch (err) {
        // Archived since this writer's last write (its hot records purged, which the tail proof
        // reports as acknowledged events gone): restore, and go on when the archive ends where
        // this writer did.
        const gen = s.conn.gen
        const t = err instanceof AgentlogConflictError && isMaterialized ? await this.restoreArchivedSince(s, id, tok) : undefined
        if (t === undefined || t.nextSeq !== first) throw err
        this.proved(id, gen)
        records = await this.write(s, id, tok, t, events, lines)
      }
      if (this.metrics !== undefined) {
        let bytes = 0
        for (let i = 0; i < events.length; i++) bytes += fieldBytes(lines.bytes(i), events[i]!)
        this.metrics.wrote(events.length, records, bytes, started)
      }
    } catch (err) {
      // A retry (dsh appends the same events again) proves the tail first: this try may have
      // been cut by a server restarting, or fenced.
      this.unproved.add(id)
      this.metrics?.failed(err)
      this.report(s, id, tok, first, last, err as Error)
      throw err
    }
  }

  /** The session's tail was proved (or read from the leader) at connection generation gen. */
  private proved(id: string, gen: number): void {
    this.provedGen.set(id, gen)
    this.unproved.delete(id)
    this.leases.proved(id)
  }

  /**
   * Wait for the connection (a record is never handed to nats.js while it is down: it would send
   * it with the guard of before the moment it is back, before any proof), then tell whether the
   * session's tail must be proved before the next record: after a reconnect, a failed write, a
   * lease taken again, or a lease renewal gap (PROTOCOL.md §5.7).
   */
  private async mustProve(s: Store, id: string, first: number, last: number): Promise<boolean> {
    if (!s.conn.connected && !await s.conn.waitConnected(s.timeoutMs)) {
      throw new Error(`agentlog: append to session ${JSON.stringify(id)} seqs ${first}..${last}: not connected to NATS for ${s.timeoutMs} ms; nothing was sent`)
    }
    return this.unproved.has(id) || this.provedGen.get(id) !== s.conn.gen || this.leases.needsProof(id)
  }

  /**
   * Check the session's tail t, read from the stream leader, against a, what this writer
   * acknowledged (or read) last; it returns when t is a's record (a record guarded with
   * a.streamSeq continues the log). Otherwise it throws: an AgentlogAckedLostError when events of
   * a are no longer stored (the server lost them, or they were purged, and the subject may have
   * been re-grown by another writer up to a.streamSeq), an AgentlogConflictError when another
   * writer appended after them. first..last are the seqs being written, for the error.
   */
  private async checkTail(s: Store, id: string, tok: string, a: Tail, t: Tail, first: number, last: number, cause?: unknown): Promise<void> {
    if (t.streamSeq === a.streamSeq && t.nextSeq === a.nextSeq && (a.msgId === '' || t.msgId === a.msgId)) return
    const found = `the tail record is at stream seq ${t.streamSeq} (Nats-Msg-Id ${JSON.stringify(t.msgId)}, next seq ${t.nextSeq})`
    const opts = cause === undefined ? undefined : { cause }
    if (a.streamSeq === 0) {
      throw new AgentlogConflictError(id, first, last, 0, `expected an empty log, ${found}`, opts)
    }
    const lost = (from: number, detail: string) =>
      new AgentlogAckedLostError(id, first, last, a.streamSeq, Math.max(0, Math.min(from, t.nextSeq)), a.nextSeq - 1, detail, opts)
    const from = a.msgId === '' || a.firstSeq === undefined ? a.nextSeq - 1 : a.firstSeq
    if (t.streamSeq === a.streamSeq) {
      throw lost(from, `stream seq ${a.streamSeq} now holds another record (Nats-Msg-Id ${JSON.stringify(t.msgId)}, next seq ${t.nextSeq})`)
    }
    const rec = await s.recordAt(id, tok, a.streamSeq)
    if (rec === null || rec.nextSeq !== a.nextSeq || (a.msgId !== '' && rec.msgId !== a.msgId)) {
      throw lost(from, `stream seq ${a.streamSeq} no longer holds it; ${found}`)
    }
    if (t.nextSeq < a.nextSeq) throw lost(t.nextSeq, `the log ends before seq ${a.nextSeq}: ${found}`)
    throw new AgentlogConflictError(id, first, last, a.streamSeq, found, opts)
  }

  /**
   * A record of ours stored at stream seq seq (an ack across a reconnect, a dedupe, our own record
   * found at the tail) continues our log only if the record at its guard a.streamSeq is still a's;
   * else an AgentlogAckedLostError: it was guarded on another writer's record there, written after
   * the server lost ours.
   */
  private async provePrev(s: Store, id: string, tok: string, a: Tail, seq: number, first: number, last: number): Promise<void> {
    if (a.streamSeq === 0) return
    const rec = await s.recordAt(id, tok, a.streamSeq)
    if (rec !== null && rec.nextSeq === a.nextSeq && (a.msgId === '' || rec.msgId === a.msgId)) return
    const from = a.msgId === '' || a.firstSeq === undefined ? a.nextSeq - 1 : a.firstSeq
    throw new AgentlogAckedLostError(id, first, last, a.streamSeq, from, a.nextSeq - 1,
      `stream seq ${a.streamSeq} holds another record now (${rec === null ? 'none of this session' : `Nats-Msg-Id ${JSON.stringify(rec.msgId)}, next seq ${rec.nextSeq}`}), `
      + `and the record written at stream seq ${seq} follows it`)
  }

  /**
   * Register the session's metadata: a KV create by hand (PROTOCOL.md §6), so that the entry
   * carries a fresh incarnation in its Agentlog-Incarnation header. A retry of our own create
   * (same header line, same incarnation) passes, and so does a retry of our own first record.
   */
  private async createMeta(s: Store, meta: SessionHeader, tok: string): Promise<void> {
    const value = headerLine(meta)
    const id = meta.id
    const bucket = s.names.sessionsBucket
    const subject = s.kvPutSubject(bucket, tok)
    let inc = this.incarnations.get(id)
    if (inc === undefined || inc === '') {
      inc = nuid.next()
      this.incarnations.set(id, inc)
    }
    let expect = 0
    for (let attempt = 0; ; attempt++) {
      try {
        await s.acks.publish(subject, value, [[HEADER_INCARNATION, inc], [HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(expect)]])
        return
      } catch (err) {
        if (!isWrongLastSequence(err)) {
          throw new Error(`agentlog: create session ${JSON.stringify(id)} (key ${tok} in KV bucket ${bucket}): ${(err as Error).message}`, { cause: err })
        }
        const entry = await s.readMeta(tok)
        if (entry === null && attempt === 0) {
          // The key's last entry is a delete marker (the metadata of an unwritten session was
          // removed): create over it.
          const m = await s.jsm.streams.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${tok}` })
          if (m !== null) { expect = m.seq; continue }
        }
        if (entry === null) throw new Error(`agentlog: create session ${JSON.stringify(id)} (key ${tok} in KV bucket ${bucket}): ${(err as Error).message}`, { cause: err })
        const ours = entry.value === value && entry.incarnation === inc
        const last = await s.lastRecord(s.subject(tok))
        if (last !== null) {
          // A retry of our own first record whose ack was lost: write() finds it at the tail.
          const firstId = this.msgIdOf(id, tok, 0)
          const msgId = last.header.get(HEADER_MSG_ID)
          if (ours && (msgId === firstId || msgId.startsWith(`${firstId}~`))) return
          throw new Error(`agentlog: session ${JSON.stringify(id)} already exists (it has records up to stream seq ${last.seq}); load or resume it instead`)
        }
        if (!ours) {
          throw new Error(`agentlog: session ${JSON.stringify(id)} already exists: another writer registered its metadata (key ${tok} in KV bucket ${bucket}) and has not written yet`)
        }
        return // our own earlier try (its record was not written): carry on
      }
    }
  }

  /**
   * Write events as one guarded record (or an atomic batch of records when too big) after a, the
   * session's tail as this writer knows it (a.streamSeq is the guard), and resolve a lost ack, a
   * dedupe or a guard conflict by reading the tail (PROTOCOL.md §5). Before a record is sent the
   * tail is proved from the stream leader whenever this writer's view of it may be stale
   * (mustProve, checkTail); a record stored across a reconnect, or found stored, is checked to
   * follow a's record (provePrev). It returns the number of records this call published (for the
   * metrics).
   */
  private async write(s: Store, id: string, tok: string, a: Tail, events: readonly WireEvent[], lines: EncodedLines): Promise<number> {
    const subject = s.subject(tok)
    let records = 0
    /** Our record (a prefix of events, or all) found stored at tail t: true when events are all stored. */
    const storedAt = (t: Tail, stored: number): boolean => {
      a = { streamSeq: t.streamSeq, nextSeq: t.nextSeq, msgId: t.msgId, firstSeq: t.firstSeq }
      this.tails.set(id, a)
      if (stored >= events.length) return true
      // An earlier try stored a prefix of this batch: write the rest after it.
      events = events.slice(stored)
      lines = lines.from(stored)
      return false
    }
    for (;;) {
      const first = events[0]!.seq
      const last = events[events.length - 1]!.seq
      const guard = a.streamSeq
      const msgId = this.msgIdOf(id, tok, first)
      if (await this.mustProve(s, id, first, last)) {
        const gen = s.conn.gen
        const t = await s.leaderTail(id, tok)
        const stored = ownTail(t, msgId, first, last)
        if (stored >= 0) {
          // An earlier try whose answer was lost is stored: it counts if it follows our log.
          await this.provePrev(s, id, tok, a, t.streamSeq, first, last)
          this.proved(id, gen)
          if (storedAt(t, stored)) return records
          continue
        }
        await this.checkTail(s, id, tok, a, t, first, last)
        this.proved(id, gen)
      }
      const gen = s.conn.gen
      let ack: PubAck
      try {
        ack = await this.publish(s, id, tok, subject, guard, msgId, events, lines)
        records += (ack as PubAck & { records?: number }).records ?? 1
      } catch (err) {
        if (!isWrongLastSequence(err) && !isBatchDuplicateMsgId(err)) {
          if (err instanceof AgentlogWireError || err instanceof AgentlogConflictError) throw err
          throw new Error(`agentlog: append to session ${JSON.stringify(id)} seqs ${first}..${last} (expected last stream seq ${guard}): ${(err as Error).message}`, { cause: err })
        }
        const t = await s.leaderTail(id, tok)
        const stored = ownTail(t, msgId, first, last)
        if (stored < 0) {
          await this.checkTail(s, id, tok, a, t, first, last, err)
          throw new AgentlogConflictError(id, first, last, guard,
            `the tail record is at stream seq ${t.streamSeq} (Nats-Msg-Id ${JSON.stringify(t.msgId)}, next seq ${t.nextSeq})`, { cause: err })
        }
        await this.provePrev(s, id, tok, a, t.streamSeq, first, last)
        if (storedAt(t, stored)) return records
        continue
      }
      if (ack.duplicate) {
        if (ack.seq <= guard) {
          throw new AgentlogConflictError(id, first, last, guard, `Nats-Msg-Id ${JSON.stringify(msgId)} matched stream seq ${ack.seq}, at or before the guard`)
        }
        const t = await s.leaderTail(id, tok)
        const stored = t.streamSeq === ack.seq ? ownTail(t, msgId, first, last) : -1
        if (stored < 0) {
          throw new AgentlogConflictError(id, first, last, guard,
            `Nats-Msg-Id ${JSON.stringify(msgId)} was deduplicated as stream seq ${ack.seq}, but the tail record is stream seq ${t.streamSeq} (next seq ${t.nextSeq})`)
        }
        await this.provePrev(s, id, tok, a, t.streamSeq, first, last)
        if (storedAt(t, stored)) return records
        continue
      }
      if (s.conn.gen !== gen) {
        // Acknowledged across a reconnect: nats.js may have sent it from its reconnect buffer,
        // with our guard, before anything was proved.
        const after = s.conn.gen
        await this.provePrev(s, id, tok, a, ack.seq, first, last)
        this.proved(id, after)
      }
      a = { streamSeq: ack.seq, nextSeq: last + 1, msgId, firstSeq: first }
      this.tails.set(id, a)
      return records
    }
  }

  /**
   * Publish events as one record, its events too large for any record of the window offloaded to
   * blobs first; as an atomic batch of records within the max message size when one is too big.
   */
  private async publish(s: Store, id: string, tok: string, subject: string, guard: number, msgId: string,
    events: readonly WireEvent[], lines: EncodedLines): Promise<PubAck> {
    const first = events[0]!.seq
    const limit = s.maxMsgSize
    const n = events.length
    // Worst-case headers of any record of a split of this window (every number at its widest).
    const worst = recordHeaders(tok, events[n - 1]!.seq, n)
    worst.push([HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(guard)], [HEADER_MSG_ID, `${msgId}~${n}`],
      ['Nats-Batch-Id', 'x'.repeat(22)], ['Nats-Batch-Sequence', String(n)], ['Nats-Batch-Commit', '1'])
    const budget = limit - headerWireSize(worst)
    // An event no record of the window can hold goes to agentlog_blobs first, then its record
    // (written again when that took so long that a collector could take the blobs for orphans).
    const started = Date.now()
    let off: { lines: EncodedLines; blobs: Offloaded[] } = { lines, blobs: [] }
    if (lines.longest() > Math.min(budget, this.maxEventBytes)) {
      off = await offload(s, id, tok, events, lines, budget, this.maxEventBytes)
      if (off.blobs.length > 0 && Date.now() - started > BLOB_MAX_AGE_AT_PUBLISH_MS) off = await offload(s, id, tok, events, lines, budget, this.maxEventBytes)
    }
    lines = off.lines
    const blobAt = new Map(off.blobs.map(b => [b.index, b.ref]))
    const pairs = withBlobs(recordHeaders(tok, first, n), blobAt, 0, n)
    pairs.push([HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(guard)], [HEADER_MSG_ID, msgId])
    // One UTF-8 encoding of the whole body, written line by line into one buffer.
    const body = lines.body(0, n)
    if (headerWireSize(pairs) + body.length <= limit) {
      return s.acks.publish(subject, body, pairs)
    }
    // Split: cut into records within the limit, committed as one atomic batch (ADR-50).
    const parts = splitRecords(id, events, lines, blobAt, budget, limit)
    const record = (k: number) => {
      const [a, b] = parts[k]!
      const h = withBlobs(recordHeaders(tok, events[a]!.seq, b - a), blobAt, a, b)
      if (k === 0) h.push([HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(guard)])
      h.push([HEADER_MSG_ID, k === parts.length - 1 ? msgId : `${msgId}~${k + 1}`])
      return { data: lines.body(a, b), headers: headersOf(h) }
    }
    const r0 = record(0)
    const batch = await s.js.startBatch(subject, r0.data, { headers: r0.headers })
    for (let k = 1; k < parts.length - 1; k++) {
      const r = record(k)
      batch.add(subject, r.data, { headers: r.headers })
    }
    const rl = record(parts.length - 1)
    const ack = await batch.commit(subject, rl.data, { headers: rl.headers })
    return { stream: ack.stream, seq: ack.seq, duplicate: false, records: parts.length } as PubAck
  }

  /**
   * Bring an archived session (no hot record) back to the hot stream before its first write
   * (PROTOCOL.md §13 "Restoring", as Go's store.Session.Restore): the archive's events, their
   * lines as archived, as one record or one atomic batch guarded with expected last subject seq 0
   * and Nats-Msg-Id restore:<archive id> (split parts ~k). A guard conflict or dedupe means another
   * writer's restore (or write) came first: the session is hot again. Returns the tail to append
   * after; a session with no archive keeps its empty tail.
   */
  private async restore(s: Store, id: string, tok: string): Promise<Tail> {
    const empty: Tail = { streamSeq: 0, nextSeq: 0, msgId: '' }
    const head = await readArchiveHead(s, id, tok)
    if (head === undefined) return empty
    let a = this.archives.get(id)
    if (a === undefined || a.head.archiveId !== head.archiveId) a = await readArchive(s, head)
    const inc = this.incarnations.get(id) ?? ''
    if (a.head.incarnation !== inc) {
      throw new Error(`agentlog: restore session ${JSON.stringify(id)}: its archive ${a.head.archiveId} is of incarnation ${JSON.stringify(a.head.incarnation)}, its metadata of ${JSON.stringify(inc)}`)
    }
    const msgId = restoreMsgId(a.head.archiveId)
    const lines = EncodedLines.ofLines(a.lines)
    let ack: PubAck
    try {
      ack = await this.publish(s, id, tok, s.subject(tok), 0, msgId, a.events, lines)
    } catch (err) {
      if (!isWrongLastSequence(err) && !isBatchDuplicateMsgId(err)) {
        if (err instanceof AgentlogWireError) throw err
        throw new Error(`agentlog: restore session ${JSON.stringify(id)} from archive ${a.head.archiveId} (${a.events.length} events): ${(err as Error).message}`, { cause: err })
      }
      ack = { duplicate: true } as PubAck
    }
    this.archives.delete(id)
    if (ack.duplicate) {
      const tail = await s.leaderTail(id, tok)
      if (tail.streamSeq === 0) {
        throw new Error(`agentlog: restore session ${JSON.stringify(id)} from archive ${a.head.archiveId}: its records were refused as written already, but the session has none`)
      }
      this.tails.set(id, tail)
      return tail
    }
    // msgId '' (not compared by a later proof): a split restore's last record carries msgId~k.
    const tail: Tail = { streamSeq: ack.seq, nextSeq: a.events.length, msgId: '' }
    this.tails.set(id, tail)
    return tail
  }

  /** After a conflict: the restored tail when the session has no hot record now (archived meanwhile), else undefined. */
  private async restoreArchivedSince(s: Store, id: string, tok: string): Promise<Tail | undefined> {
    // A session with hot records keeps this writer's tail (a retry proves it again, and fails
    // the same way when its events are gone).
    if ((await s.leaderTail(id, tok)).streamSeq !== 0) return undefined
    this.tails.delete(id)
    const t = await this.restore(s, id, tok)
    return t.streamSeq === 0 ? undefined : t
  }

  /** Publish an agent/error report (best effort; never a session event). */
  private report(s: Store, id: string, tok: string, firstSeq: number, lastSeq: number, err: Error): void {
    try {
      if (s.nc.isClosed()) return
      s.nc.publish(`${s.names.errorsPrefix}.${tok}`, JSON.stringify({
        type: 'agent/error', session: id, firstSeq, lastSeq, error: err.message, time: Date.now(), writerId: this.writerId,
        ...err instanceof AgentlogConflictError ? { fenced: true } : {},
        ...err instanceof AgentlogAckedLostError ? { lost: [err.fromSeq, err.toSeq] } : {},
      }))
    } catch { /* a report is best effort */ }
  }
}

/** Record headers h of events [a, b) marked format 3 with an Agentlog-Blob value per offloaded event. */
function withBlobs(h: [string, string][], blobAt: ReadonlyMap<number, BlobRef>, a: number, b: number): [string, string][] {
  if (blobAt.size === 0) return h // the common case: no offloaded event
  for (let i = a; i < b; i++) {
    const ref = blobAt.get(i)
    if (ref === undefined) continue
    const f = h.findIndex(([k]) => k === HEADER_FORMAT)
    h[f] = [HEADER_FORMAT, RECORD_FORMAT_CHUNKS]
    h.push([HEADER_BLOB, blobHeaderValue(ref)])
  }
  return h
}

/**
 * Cut events into runs [a, b) whose bodies fit budget bytes (an offloaded event counts as its
 * Agentlog-Blob header); an event that fits no record, or more runs than an atomic batch holds,
 * is an AgentlogWireError.
 */
function splitRecords(id: string, events: readonly WireEvent[], lines: EncodedLines, blobAt: ReadonlyMap<number, BlobRef>, budget: number, limit: number): [number, number][] {
  const n = events.length
  const parts: [number, number][] = []
  let from = 0
  let size = 0
  for (let i = 0; i < n; i++) {
    const ref = blobAt.get(i)
    const len = ref !== undefined ? HEADER_BLOB.length + blobHeaderValue(ref).length + 4 : lines.bytes(i)
    if (len > budget) {
      throw new AgentlogWireError(id, events[i]!.seq, 'event-too-large',
        `the event is ${len} bytes encoded (plus ${limit - budget} bytes of record headers), the max message size is ${limit} bytes`)
    }
    let add = i > from ? len + 1 : len
    if (i > from && size + add > budget) {
      parts.push([from, i])
      from = i
      size = 0
      add = len
    }
    size += add
  }
  parts.push([from, n])
  if (parts.length > MAX_BATCH_RECORDS) {
    const first = events[0]!.seq
    throw new AgentlogWireError(id, first, 'batch-too-large',
      `seqs ${first}..${events[n - 1]!.seq} need ${parts.length} records of at most ${limit} bytes, more than the ${MAX_BATCH_RECORDS} an atomic batch may hold`)
  }
  return parts
}

/**
 * How many of events[first..last] the tail record shows as stored by this writer (its Nats-Msg-Id
 * is msgId, or msgId plus a split-part suffix, and it ends inside the batch); −1 when the tail is
 * not ours.
 */
function ownTail(t: Tail, msgId: string, first: number, last: number): number {
  const ours = t.msgId === msgId || (t.msgId.startsWith(msgId) && t.msgId.length > msgId.length && t.msgId[msgId.length] === '~')
  if (!ours || t.nextSeq <= first || t.nextSeq > last + 1) return -1
  return t.nextSeq - first
}

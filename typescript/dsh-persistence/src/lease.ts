/**
 * Writer leases (PROTOCOL.md §5.5): this writer's entries in KV agentlog_writers, taken before its
 * first write to a session, renewed every TTL/4 (revision-guarded), released when idle and at close.
 */
import { hostname } from 'node:os'
import { AgentlogConflictError, AgentlogLeaseHeldError, isWrongLastSequence } from './errors.js'
import type { Store } from './store.js'
import { HEADER_EXPECTED_LAST_SUBJECT_SEQ, token } from './wire.js'

/** A lease not written through for this long is released (ms). */
const LEASE_IDLE_MS = 60_000

const HOSTNAME = hostname()

/**
 * A lease this writer holds: its revision, when it was taken, last written through and last
 * renewed (ms), whether another writer took it, and whether a renewal failed or came late since
 * the session's tail was last proved (gap).
 */
interface HeldLease { rev: number; since: number; lastWrite: number; renewedAt: number; lost: boolean; gap: boolean }

/** The leases one writer holds, by session id. */
export class Leases {
  private readonly held = new Map<string, HeldLease>()
  private renewTimer?: NodeJS.Timeout
  private stopped = false

  /** Leases of writer writerId, of ttlMs (used only with a store that has a writers bucket). */
  constructor(private readonly writerId: string, private readonly ttlMs: number) {}

  /** The number of sessions whose lease this writer holds. */
  count(): number {
    return this.held.size
  }

  private value(id: string, since: number): string {
    return JSON.stringify({ session: id, writer: this.writerId, host: HOSTNAME, pid: process.pid, since, ttlMs: this.ttlMs })
  }

  private ttlHeader(): string {
    return `${Math.ceil(this.ttlMs / 1000)}s`
  }

  /**
   * Take this writer's lease on the session before its first write here; refuse a live one of
   * another writer (AgentlogLeaseHeldError), or one of ours another writer took over
   * (AgentlogConflictError). first and last are the seqs of the write, for the error. It resolves
   * true when it took the lease now (the writer held none: another writer may have written since).
   */
  async ensure(s: Store, id: string, tok: string, first: number, last: number): Promise<boolean> {
    const writers = s.writers
    if (writers === undefined) return false
    const held = this.held.get(id)
    if (held !== undefined) {
      if (held.lost) {
        throw new AgentlogConflictError(id, first, last, -1, `this writer's lease (key ${tok} in KV bucket ${s.names.writersBucket}) was taken over by another writer`)
      }
      held.lastWrite = Date.now()
      return false
    }
    const since = Date.now()
    let rev: number
    try {
      // A create where the key has no entry yet, in one acked publish (nats.js's KV create also
      // takes over a delete marker: it is the path when this one is refused).
      rev = await s.acks.publish(s.kvPutSubject(s.names.writersBucket, tok), this.value(id, since),
        [[HEADER_EXPECTED_LAST_SUBJECT_SEQ, '0'], ['Nats-TTL', this.ttlHeader()]]).then(a => a.seq,
        () => writers.create(tok, this.value(id, since), this.ttlHeader()))
    } catch (err) {
      const e = await writers.get(tok).catch(() => null)
      if (e === null || e.operation !== 'PUT') {
        throw new Error(`agentlog: session ${JSON.stringify(id)}: take the writer lease (key ${tok} in KV bucket ${s.names.writersBucket}): ${(err as Error).message}`, { cause: err })
      }
      let holder: Record<string, unknown> = {}
      try { holder = e.json() } catch { /* an unreadable lease is another writer's */ }
      if (holder.writer !== this.writerId) throw new AgentlogLeaseHeldError(id, first, last, holder)
      rev = e.revision // our own lease (an earlier try)
    }
    this.held.set(id, { rev, since, lastWrite: Date.now(), renewedAt: Date.now(), lost: false, gap: false })
    if (this.renewTimer === undefined) {
      this.renewTimer = setInterval(() => { void this.renew(s) }, Math.max(250, Math.floor(this.ttlMs / 4)))
      this.renewTimer.unref()
    }
    return true
  }

  /** Give back the lease on one session (only if still at its revision). */
  async drop(s: Store, id: string, tok: string): Promise<void> {
    const l = this.held.get(id)
    if (l === undefined || s.writers === undefined) return
    this.held.delete(id)
    if (!l.lost) await s.writers.delete(tok, { previousSeq: l.rev }).catch(() => {})
  }

  /** Renew every held lease (revision-guarded); release those idle for LEASE_IDLE_MS. */
  private async renew(s: Store): Promise<void> {
    const writers = s.writers
    if (writers === undefined || this.stopped) return
    const now = Date.now()
    await Promise.all([...this.held].map(async ([id, l]) => {
      if (l.lost) return
      const tok = token(id)
      if (now - l.lastWrite > LEASE_IDLE_MS) {
        this.held.delete(id)
        await writers.delete(tok, { previousSeq: l.rev }).catch(() => {})
        return
      }
      try {
        l.rev = await this.put(s, tok, id, l.since, l.rev)
        if (Date.now() - l.renewedAt > this.ttlMs / 2) l.gap = true // late: paused, or renewals hang
        l.renewedAt = Date.now()
      } catch (err) {
        l.gap = true // the server may be restarting, its state changing under us (the tail with it)
        if (isWrongLastSequence(err)) await this.regain(s, id, tok, l)
      }
    }))
  }

  /** A revision-guarded put of this writer's lease value (expect: the revision, 0 for a create); the new revision. */
  private async put(s: Store, tok: string, id: string, since: number, expect: number): Promise<number> {
    const ack = await s.acks.publish(s.kvPutSubject(s.names.writersBucket, tok), this.value(id, since),
      [[HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(expect)], ['Nats-TTL', this.ttlHeader()]])
    return ack.seq
  }

  /**
   * After a renewal refused by its revision guard: our own lease at another revision (the server
   * came back with older state) is renewed there; an expired or deleted one is taken again; one
   * of another writer means this writer was taken over (lost). Either way the tail is proved
   * before the next write (gap).
   */
  private async regain(s: Store, id: string, tok: string, l: HeldLease): Promise<void> {
    try {
      const e = await s.writers!.get(tok)
      if (e === null || e.operation !== 'PUT') {
        // Expired or deleted, and nobody took it: take it again over what the key holds.
        l.rev = await this.put(s, tok, id, l.since, e === null ? 0 : e.revision)
        l.renewedAt = Date.now()
        return
      }
      let holder: Record<string, unknown> = {}
      try { holder = e.json() } catch { /* an unreadable lease is another writer's */ }
      if (holder.writer === this.writerId && holder.host === HOSTNAME && holder.pid === process.pid && holder.since === l.since) {
        l.rev = await this.put(s, tok, id, l.since, e.revision)
        l.renewedAt = Date.now()
        return
      }
      l.lost = true // taken over
    } catch (err) {
      if (isWrongLastSequence(err)) l.lost = true // changed again meanwhile: another writer's now
    }
  }

  /**
   * Whether the session's tail must be proved before the next write: a renewal of its lease failed
   * or came late since the last proof, or the lease has gone unrenewed for more than half its TTL.
   * False for a session without a lease.
   */
  needsProof(id: string): boolean {
    const l = this.held.get(id)
    if (l === undefined) return false
    return l.gap || Date.now() - l.renewedAt > this.ttlMs / 2
  }

  /** The session's tail was proved now: clear its renewal gap. */
  proved(id: string): void {
    const l = this.held.get(id)
    if (l !== undefined) l.gap = false
  }

  /** Stop renewing (the backend is closing). */
  stop(): void {
    this.stopped = true
    if (this.renewTimer !== undefined) clearInterval(this.renewTimer)
    this.renewTimer = undefined
  }

  /** Stop renewing and delete the leases this writer holds (each only if still at its revision). */
  async release(s: Store): Promise<void> {
    this.stop()
    const writers = s.writers
    if (writers === undefined) return
    const held = [...this.held]
    this.held.clear()
    await Promise.all(held.filter(([, l]) => !l.lost).map(([id, l]) => writers.delete(token(id), { previousSeq: l.rev }).catch(() => {})))
  }
}

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

/** A lease this writer holds. */
interface HeldLease { rev: number; since: number; lastWrite: number; lost: boolean }

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
   * (AgentlogConflictError). first and last are the seqs of the write, for the error.
   */
  async ensure(s: Store, id: string, tok: string, first: number, last: number): Promise<void> {
    const writers = s.writers
    if (writers === undefined) return
    const held = this.held.get(id)
    if (held !== undefined) {
      if (held.lost) {
        throw new AgentlogConflictError(id, first, last, -1, `this writer's lease (key ${tok} in KV bucket ${s.names.writersBucket}) was taken over by another writer`)
      }
      held.lastWrite = Date.now()
      return
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
    this.held.set(id, { rev, since, lastWrite: Date.now(), lost: false })
    if (this.renewTimer === undefined) {
      this.renewTimer = setInterval(() => { void this.renew(s) }, Math.max(250, Math.floor(this.ttlMs / 4)))
      this.renewTimer.unref()
    }
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
        const ack = await s.acks.publish(s.kvPutSubject(s.names.writersBucket, tok), this.value(id, l.since),
          [[HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(l.rev)], ['Nats-TTL', this.ttlHeader()]])
        l.rev = ack.seq
      } catch (err) {
        if (isWrongLastSequence(err)) l.lost = true // taken over, or expired
      }
    }))
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

/**
 * The backend: the cordis plugin dsh loads, a `SessionPersistence` whose storage primitives are
 * the store's, the read path's and the writer's.
 */
import { Context, Service } from '@deepseek-ai/cordis'
import type { SessionEvent, SessionHeader, SessionId, SessionPreparation } from '@deepseek-ai/dsh-session'
import {
  PersistenceCoordinator, SessionPersistence, type SessionPersistenceRevision,
  type PersistenceBackend, type SessionInspection, type SessionPersistenceSnapshot, type StoredPrefix,
} from '@deepseek-ai/dsh-session-persistence'
import type { NatsConnection } from '@nats-io/transport-node'
import { ConfigSchema, parseConfig, type Config } from './config.js'
import { EncodedLines } from './encoder.js'
import { AgentlogMetrics } from './metrics.js'
import { readArchiveHead } from './archive.js'
import { listStored, readArchivedSession, readEvents, readHead } from './read.js'
import { Store } from './store.js'
import { token, type WireEvent } from './wire.js'
import { Writer } from './write.js'

/**
 * The agentlog persistence backend. Load it as a cordis plugin (`ctx.plugin(AgentlogSessionPersistence,
 * { servers })`); it registers as `ctx.sessionPersistence`. The {@link PersistenceCoordinator} does the
 * buffering, serialization, lazy creation, crash repair and adoption; this class implements the
 * storage primitives over JetStream.
 */
export class AgentlogSessionPersistence extends SessionPersistence implements PersistenceBackend<never> {
  static inject = ['sessions']
  static Config = ConfigSchema

  override readonly supportsRawArtifacts = false
  override readonly name = 'session-persistence-agentlog'

  readonly config: Config
  /** Prefix of this instance's Nats-Msg-Id values. */
  readonly writerId: string
  private readonly ready: Promise<Store>
  private readonly writer: Writer
  private readonly coordinator: PersistenceCoordinator<never>
  private closed = false
  /** The opt-in Prometheus metrics (config.metrics), under the Go publisher's names; undefined when off. */
  readonly metrics?: AgentlogMetrics
  private pendingEvents = 0
  private pendingBytes = 0

  constructor(ctx: Context, config: Config) {
    super(ctx)
    this.config = config
    const settings = parseConfig(config)
    this.writerId = settings.writerId
    this.writer = new Writer(settings.writerId, settings.maxEventBytes, settings.leaseTtlMs)
    if (config.metrics !== undefined && config.metrics !== false) {
      this.metrics = new AgentlogMetrics(config.metrics === true ? {} : config.metrics, {
        pending: () => ({ events: this.pendingEvents, bytes: this.pendingBytes }),
        writers: () => this.writer.leases.count(),
      })
      this.writer.metrics = this.metrics
      this.metrics.address()?.catch(() => {}) // reported by Service.init
    }
    this.ready = Store.open(config, settings)
    this.ready.catch(() => {})
    // The coordinator's constructor may call loadStored for live sessions: every primitive awaits
    // `ready`, so it can be built before the connection is up.
    this.coordinator = new PersistenceCoordinator<never>(this.ctx, this, {
      preparedSessionCacheSize: settings.preparedSessionCacheSize,
      writeBatchMaxDelayMs: settings.writeBatchMaxDelayMs,
    })
  }

  /** Startup: `await ctx.plugin(...)` fails with the connection error, if any. */
  async [Service.init](): Promise<void> {
    await this.ready
    await this.metrics?.address()
  }

  /** The NATS connection, once connected (for tools and tests). */
  connection(): Promise<NatsConnection> {
    return this.ready.then(s => s.nc)
  }

  // --- service API (delegated to the coordinator) ---

  locate(_meta: SessionHeader): undefined {
    return undefined
  }

  create(meta: SessionHeader): Promise<void> {
    return this.coordinator.create(meta)
  }

  append(id: SessionId, events: readonly SessionEvent[]): Promise<void> {
    return this.coordinator.append(id, events)
  }

  override prepare(id: SessionId, signal?: AbortSignal): Promise<SessionPreparation> {
    return this.coordinator.prepare(id, signal)
  }

  load(id: SessionId): Promise<SessionInspection> {
    return this.coordinator.load(id)
  }

  inspect(id: SessionId, signal?: AbortSignal): Promise<SessionInspection> {
    return this.coordinator.inspect(id, signal)
  }

  readFrom(id: SessionId, fromSeq: number, signal?: AbortSignal): Promise<{ meta: SessionHeader; events: SessionEvent[] }> {
    return this.coordinator.readFrom(id, fromSeq, signal)
  }

  async list(signal?: AbortSignal): Promise<SessionHeader[]> {
    signal?.throwIfAborted()
    const s = await this.ready
    return (await listStored(s, signal)).map(x => x.header as SessionHeader)
  }

  async listSnapshots(signal?: AbortSignal): Promise<SessionPersistenceSnapshot[]> {
    signal?.throwIfAborted()
    const s = await this.ready
    const out: SessionPersistenceSnapshot[] = []
    for (const { header, records, archiveId } of await listStored(s, signal)) {
      out.push({ header: header as SessionHeader, revision: archiveId === undefined ? s.revision(records) : s.archiveRevision(archiveId) })
    }
    return out
  }

  // --- PersistenceBackend: storage primitives ---

  async loadStored(id: SessionId, signal?: AbortSignal): Promise<StoredPrefix<never> | undefined> {
    signal?.throwIfAborted()
    const s = await this.ready
    signal?.throwIfAborted()
    const tok = token(id)
    const gen = s.conn.gen // the tail read now is proved as of this connection generation
    const head = await readHead(s, id, tok, signal)
    try {
      return await this.loadFrom(s, id, tok, head, gen, signal)
    } catch (err) {
      // An archive committed while the hot records were read (they, or their blobs, were purged
      // under the read): read the session again, from where it lives now (PROTOCOL.md §13).
      if (head === undefined || signal?.aborted) throw err
      if (await readArchiveHead(s, id, tok).catch(() => undefined) === undefined) throw err
      const again = s.conn.gen
      return this.loadFrom(s, id, tok, await readHead(s, id, tok, signal), again, signal)
    }
  }

  private async loadFrom(s: Store, id: SessionId, tok: string, head: Awaited<ReturnType<typeof readHead>>, gen: number, signal?: AbortSignal): Promise<StoredPrefix<never> | undefined> {
    if (head === undefined) {
      this.writer.loadedTail(id, undefined, gen)
      // No hot record: the log may be archived (PROTOCOL.md §13); a write restores it first.
      const arch = await readArchivedSession(s, id, tok, signal)
      this.writer.loadedArchive(id, arch?.archived)
      if (arch === undefined) return undefined
      this.writer.loadedIncarnation(id, arch.entry.incarnation)
      return { meta: arch.meta as SessionHeader, events: arch.archived.events as SessionEvent[], revision: s.archiveRevision(arch.archived.head.archiveId) }
    }
    this.writer.loadedArchive(id, undefined)
    this.writer.loadedIncarnation(id, head.entry.incarnation)
    const { events, records, tail } = await readEvents(s, id, tok, head.last, signal)
    this.writer.loadedTail(id, tail, gen)
    return { meta: head.meta as SessionHeader, events: events as SessionEvent[], revision: s.revision(records) }
  }

  async readStoredRevision(id: SessionId, signal?: AbortSignal): Promise<SessionPersistenceRevision | undefined> {
    signal?.throwIfAborted()
    const s = await this.ready
    const tok = token(id)
    const n = await s.recordCount(s.subject(tok))
    signal?.throwIfAborted()
    if (n > 0) return s.revision(n)
    const head = await readArchiveHead(s, id, tok)
    return head === undefined ? undefined : s.archiveRevision(head.archiveId)
  }

  async appendBatch(meta: SessionHeader, events: readonly SessionEvent[], isMaterialized: boolean): Promise<void> {
    if (events.length === 0) return
    // The coordinator hands over detached, validated lossless-JSON snapshots; encodeLines still
    // refuses what JSON.stringify cannot encode, naming the session, seq and type.
    const lines = EncodedLines.of(meta.id, events as readonly WireEvent[])
    let acked = false
    let bytes = 0
    for (let i = 0; i < events.length; i++) bytes += lines.bytes(i)
    this.pendingEvents += events.length
    this.pendingBytes += bytes
    try {
      const s = await this.ready
      if (this.closed) {
        throw new Error(`agentlog: session ${JSON.stringify(meta.id)} seqs ${events[0]!.seq}..${events[events.length - 1]!.seq}: the backend is closed`)
      }
      await this.writer.append(s, meta, events as readonly WireEvent[], isMaterialized, lines)
      acked = true
    } finally {
      this.pendingEvents -= events.length
      this.pendingBytes -= bytes
      lines.release(acked)
    }
  }

  async commitRepair(meta: SessionHeader, _torn: undefined, closers: readonly SessionEvent[]): Promise<void> {
    // Records are atomic: there is never a torn tail, only closers to append.
    if (closers.length > 0) await this.appendBatch(meta, closers, true)
  }

  /** Teardown, run by the coordinator after it drained every buffered batch: drain the connection. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    this.writer.leases.stop()
    await this.metrics?.close()
    const s = await this.ready.catch(() => undefined)
    if (s !== undefined && !s.nc.isClosed()) {
      await this.writer.leases.release(s)
      await s.nc.drain()
      s.acks.stop(new Error('agentlog: the backend is closed'))
    }
  }
}

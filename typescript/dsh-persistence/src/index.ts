/**
 * agentlog session persistence for the DeepSeek Harness (dsh): a `SessionPersistence` backend that
 * stores every session as one subject of the agentlog JetStream stream, in agentlog's wire format
 * (docs/PROTOCOL.md), so that the Go stack (`agentlog events`, `messages`, `fork`, the projector)
 * reads what dsh writes and dsh loads what the Go stack writes.
 * @module @agentlog/dsh-session-persistence
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { Context, Service } from '@deepseek-ai/cordis'
import z from '@deepseek-ai/schemastery'
import type { SessionEvent, SessionHeader, SessionId, SessionPreparation } from '@deepseek-ai/dsh-session'
import {
  DEFAULT_PREPARED_SESSION_CACHE_SIZE, DEFAULT_WRITE_BATCH_MAX_DELAY_MS, MAX_WRITE_BATCH_DELAY_MS,
  PersistenceCoordinator, SessionPersistence, SessionPersistenceRevision,
  type PersistenceBackend, type SessionInspection, type SessionPersistenceSnapshot, type StoredPrefix,
} from '@deepseek-ai/dsh-session-persistence'
import {
  connect, createInbox, credsAuthenticator, nkeyAuthenticator, headers as natsHeaders, nuid, NoRespondersError, TimeoutError,
  type Authenticator, type Msg, type MsgHdrs, type NatsConnection, type NodeConnectionOptions, type Subscription,
} from '@nats-io/transport-node'
import {
  jetstream, jetstreamManager, JetStreamApiError, JetStreamError,
  type JetStreamClient, type JetStreamManager, type PubAck, type StoredMsg, type StreamConfig,
} from '@nats-io/jetstream'
import { Kvm, type KV } from '@nats-io/kv'
import { Objm, type ObjectStore } from '@nats-io/obj'
import {
  AgentlogWireError, BLOBS_BUCKET, DEFAULT_MAX_EVENT_BYTES, DEFAULT_PARTITIONS, HEADER_BLOB, HEADER_FORMAT, RECORD_FORMAT_BLOBS,
  blobHeaderValue, blobName, decodeEventLine, type BlobRef, HEADER_INCARNATION, ERRORS_PREFIX, ERRORS_STREAM, HEADER_EXPECTED_LAST_SUBJECT_SEQ,
  HEADER_MSG_ID, MAX_BATCH_RECORDS, META_FORMAT, META_PARTITIONS, PROJECTIONS_BUCKET, SESSIONS_BUCKET,
  STORE_FORMAT, STREAM_NAME, SUBJECT_PREFIX, WRITERS_BUCKET, decodeRecord, encodeLines, headerLine, headerWireSize,
  idFromToken, parseHeaderLine, partition, recordHeaders, token, type WireEvent,
} from './wire.js'

export * from './wire.js'

/** JetStream API error codes (PROTOCOL.md §5). */
export const ERR_WRONG_LAST_SEQUENCE = 10071
export const ERR_WRONG_LAST_SEQUENCE_CONSTANT = 10164
export const ERR_BATCH_DUPLICATE_MSG_ID = 10201

/** A record is published only while its blobs are younger than this, ms (jetstream.BlobMaxAgeAtPublish). */
export const BLOB_MAX_AGE_AT_PUBLISH_MS = 5 * 60_000

/** Default TTL of a writer lease, ms (the Go publisher's DefaultLeaseTTL). */
export const DEFAULT_LEASE_TTL_MS = 10_000

/** TLS settings: file paths. */
export interface TlsConfig {
  /** CA certificate(s) to verify the server with (PEM file). */
  ca?: string
  /** Client certificate (PEM file), for mutual TLS. */
  cert?: string
  /** Client private key (PEM file), for mutual TLS. */
  key?: string
  /** Do the TLS handshake before the NATS INFO (server option `handshake_first`). */
  handshakeFirst?: boolean
}

/** Names of the stream and buckets; the defaults are what `agentlog provision` creates. */
export interface NamesConfig {
  stream?: string
  writersBucket?: string
  subjectPrefix?: string
  sessionsBucket?: string
  errorsStream?: string
  errorsPrefix?: string
  blobsBucket?: string
}

/** AGENTLOG_NATS_<name>, else the nats CLI's variable natsName, else undefined (empty counts as unset). */
function fromEnv(name: string, natsName: string, level?: 1 | 2): string | undefined {
  const a = process.env[`AGENTLOG_NATS_${name}`] || undefined
  const b = process.env[natsName] || undefined
  return level === 1 ? a : level === 2 ? b : a ?? b
}

type Credentials = Pick<Config, 'credsFile' | 'nkey' | 'nkeyFile' | 'user' | 'pass' | 'token'>

/**
 * The credentials: the config's when it sets any; else, as the Go CLI takes them, the first of
 * AGENTLOG_NATS_{CREDS,NKEY,USER,PASSWORD,TOKEN} and NATS_{CREDS,NKEY,USER,PASSWORD,TOKEN} that
 * sets any, as a whole (never one part from each).
 */
function credentialsOf(c: Config): Credentials {
  if (c.credsFile !== undefined || c.nkey !== undefined || c.nkeyFile !== undefined || c.user !== undefined || c.token !== undefined) return c
  for (const level of [1, 2] as const) {
    const cr: Credentials = {
      credsFile: fromEnv('CREDS', 'NATS_CREDS', level),
      nkeyFile: fromEnv('NKEY', 'NATS_NKEY', level),
      user: fromEnv('USER', 'NATS_USER', level),
      pass: fromEnv('PASSWORD', 'NATS_PASSWORD', level),
      token: fromEnv('TOKEN', 'NATS_TOKEN', level),
    }
    if (Object.values(cr).some(v => v !== undefined)) return cr
  }
  return {}
}

/**
 * Plugin config. Only `servers` is required. Credentials and TLS files the config leaves out are
 * taken from the environment as the Go CLI takes them (AGENTLOG_NATS_CREDS, _NKEY, _USER,
 * _PASSWORD, _TOKEN, _TLS_CA, _TLS_CERT, _TLS_KEY, then NATS_CREDS, NATS_NKEY, NATS_USER,
 * NATS_PASSWORD, NATS_TOKEN, NATS_CA, NATS_CERT, NATS_KEY).
 */
export interface Config {
  /** NATS server URL(s), e.g. `nats://127.0.0.1:4222`. */
  servers: string | string[]
  /** Connection name shown by the server (default `dsh-agentlog`). */
  name?: string
  /** A `.creds` file (JWT plus nkey seed), for decentralized auth. */
  credsFile?: string
  /** An nkey seed (`SU...`), or a file that holds one (`nkeyFile`). */
  nkey?: string
  nkeyFile?: string
  user?: string
  pass?: string
  token?: string
  tls?: TlsConfig
  /** Prefix of this writer's Nats-Msg-Id values (default a fresh nuid per instance). */
  writerId?: string
  /** The coordinator's fixed write-batching window, ms (default 200). */
  writeBatchMaxDelayMs?: number
  /** Cold Session preparations retained for history-to-resume reuse (default 5). */
  preparedSessionCacheSize?: number
  /**
   * TTL of this writer's lease on each session it writes (KV agentlog_writers), ms: renewed every
   * TTL/4 while the session is written, deleted at close; the Go publisher refuses to open a
   * session whose lease is live. 0 takes no leases (the guard alone fences). Default 10000.
   */
  leaseTtlMs?: number
  /** Timeout of one JetStream request (publish, get), ms (default 10000). */
  requestTimeoutMs?: number
  /**
   * Largest event accepted, in bytes of its JSON line (default 64 MiB, as the Go publisher's
   * --max-event-bytes): a larger one is refused (rule event-too-large). An event larger than one
   * record is stored in the Object Store bucket agentlog_blobs, its record naming it (PROTOCOL.md §4.1).
   */
  maxEventBytes?: number
  /**
   * Create the stream and buckets when missing, with the settings `agentlog provision` uses
   * (default false: a missing stream is an error telling to run `agentlog provision`).
   */
  provision?: boolean | { partitions?: number; maxMsgSize?: number; replicas?: number }
  /**
   * Other names than agentlog's (for isolated test namespaces). The Go stack reads only the
   * defaults: sessions written under other names are invisible to `agentlog` commands.
   */
  names?: NamesConfig
}

const ConfigSchema: z<Config> = z.object({
  servers: z.union([z.string(), z.array(z.string())]).required(),
  name: z.string(),
  credsFile: z.string(),
  nkey: z.string(),
  nkeyFile: z.string(),
  user: z.string(),
  pass: z.string(),
  token: z.string(),
  tls: z.object({ ca: z.string(), cert: z.string(), key: z.string(), handshakeFirst: z.boolean() }),
  writerId: z.string(),
  writeBatchMaxDelayMs: z.number().step(1).min(1).max(MAX_WRITE_BATCH_DELAY_MS).default(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
  preparedSessionCacheSize: z.number().step(1).min(1).default(DEFAULT_PREPARED_SESSION_CACHE_SIZE),
  requestTimeoutMs: z.number().min(1),
  leaseTtlMs: z.number().step(1).min(0),
  maxEventBytes: z.number().step(1).min(1),
  provision: z.union([z.boolean(), z.object({ partitions: z.number(), maxMsgSize: z.number(), replicas: z.number() })]),
  names: z.object({ stream: z.string(), writersBucket: z.string(), subjectPrefix: z.string(), sessionsBucket: z.string(), errorsStream: z.string(), errorsPrefix: z.string(), blobsBucket: z.string() }),
}) as any

/** A write fenced by the guard: another writer appended to the session first. Nothing was written. */
export class AgentlogConflictError extends Error {
  constructor(
    readonly session: string, readonly firstSeq: number, readonly lastSeq: number,
    readonly expectedStreamSeq: number, detail: string, options?: ErrorOptions,
  ) {
    super(`agentlog: session ${JSON.stringify(session)} seqs ${firstSeq}..${lastSeq}: the session log changed under this writer `
      + `(guard: expected last stream seq ${expectedStreamSeq}): ${detail}`, options)
    this.name = 'AgentlogConflictError'
  }
}

/** Another writer holds a live lease on the session (PROTOCOL.md §5.5). Nothing was written. */
export class AgentlogLeaseHeldError extends AgentlogConflictError {
  constructor(session: string, firstSeq: number, lastSeq: number, readonly holder: Record<string, unknown>) {
    super(session, firstSeq, lastSeq, -1, `the session is being written by writer ${JSON.stringify(holder.writer)} (host ${String(holder.host)}, pid ${String(holder.pid)}, since ${new Date(Number(holder.since)).toISOString()})`)
    this.name = 'AgentlogLeaseHeldError'
  }
}

/** A lease this writer holds. */
interface HeldLease { rev: number; since: number; lastWrite: number; lost: boolean }

/** A lease not written through for this long is released (ms). */
const LEASE_IDLE_MS = 60_000

/** The session's tail as this writer knows it. */
interface Tail { streamSeq: number; nextSeq: number; msgId: string }

/** A session's metadata entry in agentlog_sessions: the header line and the incarnation. */
interface MetaEntry { value: string; incarnation: string; seq: number }

/** The resolved connection to one agentlog store. */
interface Store {
  nc: NatsConnection
  js: JetStreamClient
  jsm: JetStreamManager
  sessions: KV
  writers?: KV
  partitions: number
  maxMsgSize: number
  /** The server's max payload, bytes (a blob chunk is one message). */
  maxPayload: number
  /** agentlog_blobs, opened at its first use (a deployment without offloaded events need not have it). */
  blobs?: Promise<ObjectStore>
  source: string
  /** Acked publishes of records and lease renewals, without nats.js's per-request machinery. */
  acks: AckMux
}

const HOSTNAME = hostname()

/**
 * A NATS header block built as one string (the bytes MsgHdrsImpl.encode() would send for the same
 * keys and values in this order): HPUB sends `encode()`'s bytes as they are.
 */
class RawHeaders {
  constructor(private readonly text: string) {}
  encode(): Uint8Array { return Buffer.from(this.text, 'latin1') }
}

/** "NATS/1.0\r\nk: v\r\n...\r\n" for ASCII keys and values (ours: tokens, decimals, Msg-Ids). */
function rawHeaderText(pairs: readonly (readonly [string, string])[]): string {
  let t = 'NATS/1.0'
  for (const [k, v] of pairs) t += '\r\n' + k + ': ' + v
  return t + '\r\n\r\n'
}

const ASCII_HEADER = /^[\x21-\x7e]+$/

/**
 * JetStream acked publishes over one wildcard inbox subscription: each publish is an HPUB with
 * reply `<inbox>.<n>`; one sweep timer fails those not acked within the timeout. The ack is
 * parsed as js.publish parses it (JetStreamApiError for an API error, no responders as
 * JetStreamError), with no per-request timer, token, stack-capturing error or header object.
 * Publishes are handed to nats.js together once per turn of the event loop (setImmediate), so the
 * records of every session whose window closed in that turn leave in one socket write.
 */
class AckMux {
  private readonly prefix = createInbox() + '.'
  private readonly pending = new Map<string, { ok: (a: PubAck) => void; fail: (e: Error) => void; deadline: number; subject: string }>()
  private readonly sub: Subscription
  private readonly timer: NodeJS.Timeout
  private n = 0
  private queue: { subject: string; data: Uint8Array | string; reply: string; headers: MsgHdrs }[] = []
  private scheduled = false
  constructor(private readonly nc: NatsConnection, private readonly timeoutMs: number) {
    this.sub = nc.subscribe(this.prefix + '*', { callback: (err, m) => this.onMsg(err, m) })
    this.timer = setInterval(() => this.sweep(), Math.min(1000, Math.max(50, Math.floor(timeoutMs / 4))))
    this.timer.unref()
    void this.sub.closed.then(() => this.stop(new Error('the ack subscription closed')), () => this.stop(new Error('the ack subscription closed')))
  }

  /** Publish data with these header pairs and wait for the JetStream ack. */
  publish(subject: string, data: Uint8Array | string, pairs: readonly (readonly [string, string])[]): Promise<PubAck> {
    let ascii = true
    for (const [k, v] of pairs) if (!ASCII_HEADER.test(k) || !ASCII_HEADER.test(v)) { ascii = false; break }
    const headers: MsgHdrs = ascii ? new RawHeaders(rawHeaderText(pairs)) as unknown as MsgHdrs : headersOf(pairs)
    const reply = this.prefix + (this.n++).toString(36)
    return new Promise<PubAck>((ok, fail) => {
      this.pending.set(reply, { ok, fail, deadline: Date.now() + this.timeoutMs, subject })
      this.queue.push({ subject, data, reply, headers })
      if (!this.scheduled) {
        this.scheduled = true
        setImmediate(this.send)
      }
    })
  }

  /** Hand the queued publishes to nats.js, which writes them in one flush. */
  private readonly send = (): void => {
    this.scheduled = false
    const q = this.queue
    this.queue = []
    for (const m of q) {
      try {
        this.nc.publish(m.subject, m.data, { reply: m.reply, headers: m.headers })
      } catch (err) {
        const p = this.pending.get(m.reply)
        if (p === undefined) continue
        this.pending.delete(m.reply)
        p.fail(err as Error)
      }
    }
  }

  private onMsg(err: Error | null, m: Msg): void {
    if (err !== null) return
    const p = this.pending.get(m.subject)
    if (p === undefined) return // late, after its timeout
    this.pending.delete(m.subject)
    if (m.data.length === 0 && m.headers?.code === 503) {
      p.fail(new JetStreamError('jetstream is not enabled', { cause: new NoRespondersError(p.subject) }))
      return
    }
    let v: any
    try { v = JSON.parse(m.string()) } catch (e) { p.fail(e as Error); return }
    if (v.error) { p.fail(new JetStreamApiError(v.error)); return }
    if (typeof v.stream !== 'string' || v.stream === '') { p.fail(new JetStreamError('invalid ack response')); return }
    v.duplicate = v.duplicate ? v.duplicate : false
    p.ok(v as PubAck)
  }

  private sweep(): void {
    const now = Date.now()
    for (const [k, p] of this.pending) {
      if (p.deadline <= now) { this.pending.delete(k); p.fail(new TimeoutError()) }
    }
  }

  stop(err: Error): void {
    clearInterval(this.timer)
    this.queue = []
    for (const [k, p] of this.pending) { this.pending.delete(k); p.fail(err) }
  }
}

function headersOf(pairs: readonly (readonly [string, string])[]): MsgHdrs {
  const h = natsHeaders()
  for (const [k, v] of pairs) h.set(k, v)
  return h
}

/** How many KV reads `list` runs at once. */
const LIST_CONCURRENCY = 32

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
  private readonly names: Required<NamesConfig>
  private readonly maxEventBytes: number
  private readonly ready: Promise<Store>
  private store?: Store
  private readonly tails = new Map<string, Tail>()
  /** Each session's incarnation (its metadata entry's Agentlog-Incarnation header; "" for legacy). */
  private readonly incarnations = new Map<string, string>()
  private readonly leases = new Map<string, HeldLease>()
  private readonly leaseTtlMs: number
  private renewTimer?: NodeJS.Timeout
  private readonly coordinator: PersistenceCoordinator<never>
  private closed = false

  constructor(ctx: Context, config: Config) {
    super(ctx)
    this.config = config
    if (config === undefined || config.servers === undefined || (Array.isArray(config.servers) && config.servers.length === 0)) {
      throw new Error('agentlog session persistence: config.servers is required (e.g. "nats://127.0.0.1:4222")')
    }
    this.writerId = config.writerId ?? nuid.next()
    if (/[\s\x00-\x1f\x7f]/.test(this.writerId) || this.writerId === '') {
      throw new Error(`agentlog session persistence: writerId ${JSON.stringify(this.writerId)} must be non-empty, without whitespace or control characters (it goes into Nats-Msg-Id)`)
    }
    this.names = {
      stream: config.names?.stream ?? STREAM_NAME,
      subjectPrefix: config.names?.subjectPrefix ?? SUBJECT_PREFIX,
      sessionsBucket: config.names?.sessionsBucket ?? SESSIONS_BUCKET,
      errorsStream: config.names?.errorsStream ?? ERRORS_STREAM,
      errorsPrefix: config.names?.errorsPrefix ?? ERRORS_PREFIX,
      writersBucket: config.names?.writersBucket ?? WRITERS_BUCKET,
      blobsBucket: config.names?.blobsBucket ?? BLOBS_BUCKET,
    }
    this.maxEventBytes = config.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES
    this.leaseTtlMs = config.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS
    if (this.leaseTtlMs !== 0 && this.leaseTtlMs < 1000) {
      throw new Error(`agentlog session persistence: leaseTtlMs ${this.leaseTtlMs}: want 0 (no leases) or at least 1000`)
    }
    this.ready = this.open()
    this.ready.then(s => { this.store = s }, () => {})
    // The coordinator's constructor may call loadStored for live sessions: every primitive awaits
    // `ready`, so it can be built before the connection is up.
    this.coordinator = new PersistenceCoordinator<never>(this.ctx, this, {
      preparedSessionCacheSize: config.preparedSessionCacheSize ?? DEFAULT_PREPARED_SESSION_CACHE_SIZE,
      writeBatchMaxDelayMs: config.writeBatchMaxDelayMs ?? DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
    })
  }

  /** Startup: `await ctx.plugin(...)` fails with the connection error, if any. */
  async [Service.init](): Promise<void> {
    await this.ready
  }

  /** The NATS connection, once connected (for tools and tests). */
  connection(): Promise<NatsConnection> {
    return this.ready.then(s => s.nc)
  }

  // --- connection ---

  private connectOptions(): NodeConnectionOptions {
    const c = this.config
    const opts: NodeConnectionOptions = {
      servers: c.servers,
      name: c.name ?? 'dsh-agentlog',
      maxReconnectAttempts: -1,
      // No stack capture per request: a record write is on the hot path.
      noAsyncTraces: true,
    }
    // nats.js writes its outbound buffer to the socket whenever it reaches 32 KiB; loopback and
    // TCP cost far more per write than per byte, so let it gather up to 256 KiB (a hidden option
    // of nats-core's ProtocolHandler; ignored by a client that lacks it).
    Object.assign(opts, { pendingLimit: 256 * 1024 })
    const auth: Authenticator[] = []
    const cr = credentialsOf(c)
    if (cr.credsFile !== undefined) auth.push(credsAuthenticator(readFileSync(cr.credsFile)))
    const seed = cr.nkey ?? (cr.nkeyFile !== undefined ? readFileSync(cr.nkeyFile, 'utf8').trim() : undefined)
    if (seed !== undefined) auth.push(nkeyAuthenticator(new TextEncoder().encode(seed)))
    if (auth.length > 1) throw new Error('agentlog session persistence: set one of credsFile and nkey/nkeyFile, not both')
    if (auth.length === 1) opts.authenticator = auth[0]
    if (cr.user !== undefined) { opts.user = cr.user; opts.pass = cr.pass }
    if (cr.token !== undefined) opts.token = cr.token
    const t: TlsConfig = {
      ca: c.tls?.ca ?? fromEnv('TLS_CA', 'NATS_CA'),
      cert: c.tls?.cert ?? fromEnv('TLS_CERT', 'NATS_CERT'),
      key: c.tls?.key ?? fromEnv('TLS_KEY', 'NATS_KEY'),
      handshakeFirst: c.tls?.handshakeFirst,
    }
    if (t.ca !== undefined || t.cert !== undefined || t.key !== undefined || t.handshakeFirst) {
      opts.tls = {
        ...t.ca !== undefined ? { caFile: t.ca } : {},
        ...t.cert !== undefined ? { certFile: t.cert } : {},
        ...t.key !== undefined ? { keyFile: t.key } : {},
        ...t.handshakeFirst ? { handshakeFirst: true } : {},
      }
    }
    return opts
  }

  private async open(): Promise<Store> {
    let nc: NatsConnection
    const servers = Array.isArray(this.config.servers) ? this.config.servers.join(',') : this.config.servers
    try {
      nc = await connect(this.connectOptions())
    } catch (err) {
      throw new Error(`agentlog session persistence: cannot connect to NATS at ${servers}: ${(err as Error).message}`, { cause: err })
    }
    try {
      const timeout = this.config.requestTimeoutMs ?? 10_000
      const js = jetstream(nc, { timeout })
      const jsm = await jetstreamManager(nc, { timeout })
      const n = this.names
      if (this.config.provision) await this.provision(nc, jsm)
      let si
      try {
        si = await jsm.streams.info(n.stream)
      } catch (err) {
        throw new Error(`stream ${n.stream} does not exist or cannot be read (run \`agentlog provision\`): ${(err as Error).message}`, { cause: err })
      }
      const cfg = si.config
      const parts = Number(cfg.metadata?.[META_PARTITIONS])
      if (!Number.isSafeInteger(parts) || parts < 1 || cfg.metadata?.[META_FORMAT] !== STORE_FORMAT) {
        throw new Error(`stream ${n.stream} lacks the agentlog metadata (${META_PARTITIONS}, ${META_FORMAT}=${STORE_FORMAT}): not an agentlog stream`)
      }
      if (!cfg.subjects?.includes(`${n.subjectPrefix}.>`)) {
        throw new Error(`stream ${n.stream} does not hold subjects ${n.subjectPrefix}.>`)
      }
      const maxPayload = nc.info?.max_payload ?? 1 << 20
      const maxMsgSize = cfg.max_msg_size !== undefined && cfg.max_msg_size > 0 ? Math.min(cfg.max_msg_size, maxPayload) : maxPayload
      let sessions: KV
      try {
        sessions = await new Kvm(js).open(n.sessionsBucket)
        await sessions.status()
      } catch (err) {
        throw new Error(`KV bucket ${n.sessionsBucket} does not exist or cannot be read (run \`agentlog provision\`): ${(err as Error).message}`, { cause: err })
      }
      let writers: KV | undefined
      if (this.leaseTtlMs > 0) {
        try {
          writers = await new Kvm(js).open(n.writersBucket)
          await writers.status()
        } catch (err) {
          throw new Error(`KV bucket ${n.writersBucket} (writer leases) does not exist or cannot be read (run \`agentlog provision\`, or set leaseTtlMs: 0): ${(err as Error).message}`, { cause: err })
        }
      }
      return { nc, js, jsm, sessions, writers, partitions: parts, maxMsgSize, maxPayload, source: `${n.stream}@${si.created}`, acks: new AckMux(nc, timeout) }
    } catch (err) {
      await nc.close().catch(() => {})
      throw new Error(`agentlog session persistence (${servers}): ${(err as Error).message}`, { cause: err })
    }
  }

  /** Create what is missing with `agentlog provision`'s settings; existing ones are kept as they are. */
  private async provision(nc: NatsConnection, jsm: JetStreamManager): Promise<void> {
    const p = typeof this.config.provision === 'object' ? this.config.provision : {}
    const n = this.names
    const replicas = p.replicas ?? 1
    const maxPayload = nc.info?.max_payload ?? 1 << 20
    const exists = async (name: string) => jsm.streams.info(name).then(() => true, (err: unknown) => {
      if (err instanceof JetStreamApiError && err.code === 10059) return false
      throw err
    })
    if (!await exists(n.stream)) {
      const cfg: any = {
        name: n.stream,
        description: 'agentlog session logs: one subject per session, one record (1..K events) per message',
        subjects: [`${n.subjectPrefix}.>`],
        retention: 'limits' as any,
        max_consumers: -1, max_msgs: -1, max_bytes: -1, max_msgs_per_subject: -1,
        discard: 'old' as any,
        max_msg_size: Math.min(p.maxMsgSize ?? 1 << 20, maxPayload),
        storage: 'file' as any,
        num_replicas: replicas,
        duplicate_window: 120_000_000_000,
        allow_direct: true,
        deny_delete: true,
        compression: 's2' as any,
        allow_atomic: true,
        metadata: { [META_PARTITIONS]: String(p.partitions ?? DEFAULT_PARTITIONS), [META_FORMAT]: STORE_FORMAT },
      } as any
      await jsm.streams.add(cfg).catch(async (err: unknown) => { if (!await exists(n.stream)) throw err })
    }
    const kvm = new Kvm(jetstream(nc))
    if (this.leaseTtlMs > 0 && !await exists(`KV_${n.writersBucket}`)) {
      await kvm.create(n.writersBucket, { history: 1, replicas, storage: 'file' as any, markerTTL: 60_000 } as any).catch(async (err: unknown) => {
        if (!await exists(`KV_${n.writersBucket}`)) throw err
      })
    }
    for (const bucket of [n.sessionsBucket, ...n.sessionsBucket === SESSIONS_BUCKET ? [PROJECTIONS_BUCKET] : []]) {
      if (!await exists(`KV_${bucket}`)) {
        await kvm.create(bucket, { history: 1, replicas, storage: 'file' as any }).catch(async (err: unknown) => {
          if (!await exists(`KV_${bucket}`)) throw err
        })
      }
    }
    if (!await exists(n.errorsStream)) {
      await jsm.streams.add({
        name: n.errorsStream,
        description: 'agentlog agent/error reports (kept for inspection, never session events)',
        subjects: [`${n.errorsPrefix}.>`],
        retention: 'limits' as any, max_consumers: -1, max_msgs: -1,
        max_bytes: 256 << 20, max_age: 7 * 24 * 3600 * 1e9, max_msgs_per_subject: 1000,
        discard: 'old' as any, storage: 'file' as any, num_replicas: replicas, allow_direct: true,
      } as any).catch(async (err: unknown) => { if (!await exists(n.errorsStream)) throw err })
    }
    if (!await exists(`OBJ_${n.blobsBucket}`)) {
      await new Objm(jetstream(nc)).create(n.blobsBucket, {
        description: 'agentlog offloaded events: <token>/<seq>/<id>, the event\'s line, for events larger than one record',
        storage: 'file' as any, replicas, compression: true,
      }).catch(async (err: unknown) => { if (!await exists(`OBJ_${n.blobsBucket}`)) throw err })
    }
  }

  private subjectOf(s: Store, tok: string): string {
    return `${this.names.subjectPrefix}.${partition(tok, s.partitions)}.${tok}`
  }

  private revision(s: Store, records: number): SessionPersistenceRevision {
    return SessionPersistenceRevision(`agentlog:${s.source}:${records}`)
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

  async listSnapshots(signal?: AbortSignal): Promise<SessionPersistenceSnapshot[]> {
    signal?.throwIfAborted()
    const s = await this.ready
    const out: SessionPersistenceSnapshot[] = []
    for (const { header, records } of await this.listStored(s, signal)) {
      out.push({ header: header as SessionHeader, revision: this.revision(s, records) })
    }
    return out
  }

  // --- PersistenceBackend: storage primitives ---

  /** Direct get of the session's last record (null when it has none). */
  private async lastRecord(s: Store, subject: string): Promise<StoredMsg | null> {
    return s.jsm.direct.getMessage(this.names.stream, { last_by_subj: subject })
  }

  /** Leader get (STREAM.MSG.GET) of the session's last record: never stale on R>1. */
  private async leaderTail(s: Store, id: string, tok: string): Promise<Tail> {
    const subject = this.subjectOf(s, tok)
    let m: StoredMsg | null
    try {
      m = await s.jsm.streams.getMessage(this.names.stream, { last_by_subj: subject })
    } catch (err) {
      if (err instanceof JetStreamApiError && err.code === 10037) m = null
      else throw new Error(`agentlog: session ${JSON.stringify(id)}: read the tail (subject ${subject}) from the stream leader: ${(err as Error).message}`, { cause: err })
    }
    if (m === null) return { streamSeq: 0, nextSeq: 0, msgId: '' }
    const { info } = decodeRecord(k => m.header.values(k), m.string(), m.seq)
    return { streamSeq: m.seq, nextSeq: info.firstSeq + info.count, msgId: m.header.get(HEADER_MSG_ID) }
  }

  /** Records of the session's subject (stream info with a subject filter); 0 when none. */
  private async recordCount(s: Store, subject: string): Promise<number> {
    const si = await s.jsm.streams.info(this.names.stream, { subjects_filter: subject } as any)
    return (si.state.subjects as Record<string, number> | undefined)?.[subject] ?? 0
  }

  /** Direct get of the session's metadata entry (null when absent or deleted). */
  private async readMeta(s: Store, tok: string): Promise<MetaEntry | null> {
    const bucket = this.names.sessionsBucket
    const m = await s.jsm.direct.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${tok}` })
    if (m === null) return null
    const op = m.header?.get('KV-Operation') ?? ''
    if (op === 'DEL' || op === 'PURGE' || (m.header?.get('Nats-Marker-Reason') ?? '') !== '') return null
    return { value: m.string(), incarnation: m.header?.get(HEADER_INCARNATION) ?? '', seq: m.seq }
  }

  /** The Nats-Msg-Id of the record starting at firstSeq (PROTOCOL.md §5.2). */
  private msgIdOf(id: string, tok: string, firstSeq: number): string {
    const inc = this.incarnations.get(id) ?? ''
    return inc === '' ? `${this.writerId}.${tok}.${firstSeq}` : `${this.writerId}.${tok}.${inc}.${firstSeq}`
  }

  async loadStored(id: SessionId, signal?: AbortSignal): Promise<StoredPrefix<never> | undefined> {
    signal?.throwIfAborted()
    const s = await this.ready
    signal?.throwIfAborted()
    const tok = token(id)
    const subject = this.subjectOf(s, tok)
    const last = await this.lastRecord(s, subject)
    signal?.throwIfAborted()
    if (last === null) {
      this.tails.delete(id)
      return undefined
    }
    const entry = await this.readMeta(s, tok)
    signal?.throwIfAborted()
    if (entry === null) {
      throw new Error(`agentlog: session ${JSON.stringify(id)} has records on ${subject} but no metadata (key ${tok} in KV bucket ${this.names.sessionsBucket})`)
    }
    const meta = parseHeaderLine(id, entry.value) as SessionHeader
    this.incarnations.set(id, entry.incarnation)
    const lastDec = decodeRecord(k => last.header.values(k), last.string(), last.seq)
    let events: WireEvent[]
    let records: number
    if (lastDec.info.firstSeq === 0) {
      this.checkSession(id, tok, lastDec.info.session)
      events = await this.resolve(s, id, tok, lastDec, last.seq)
      records = 1
    } else {
      ({ events, records } = await this.readAll(s, id, subject, last.seq, signal))
    }
    this.checkSession(id, tok, lastDec.info.session)
    const nextSeq = events.length
    this.tails.set(id, { streamSeq: last.seq, nextSeq, msgId: last.header.get(HEADER_MSG_ID) })
    return { meta, events: events as SessionEvent[], revision: this.revision(s, records) }
  }

  private checkSession(id: string, _tok: string, found: string): void {
    if (found !== id) {
      throw new AgentlogWireError(id, -1, 'record-session', `a record on this session's subject names session ${JSON.stringify(found)}`)
    }
  }

  /** Read every record of a session up to stream seq `upTo` (direct batch gets, in order). */
  private async readAll(s: Store, id: string, subject: string, upTo: number, signal?: AbortSignal): Promise<{ events: WireEvent[]; records: number }> {
    const events: WireEvent[] = []
    let records = 0
    let from = 1
    while (from <= upTo) {
      signal?.throwIfAborted()
      const iter = await s.jsm.direct.getBatch(this.names.stream, { seq: from, next_by_subj: subject, batch: 256 })
      let got = 0
      for await (const m of iter) {
        got++
        from = m.seq + 1
        if (m.seq > upTo) break
        const dec = decodeRecord(k => m.header.values(k), m.string(), m.seq)
        const info = dec.info
        this.checkSession(id, '', info.session)
        const evs = await this.resolve(s, id, token(id), dec, m.seq)
        if (info.firstSeq !== events.length) {
          throw new AgentlogWireError(id, info.firstSeq, 'record-continue',
            `record at stream seq ${m.seq} starts at seq ${info.firstSeq}, but the records before it end at seq ${events.length - 1}`)
        }
        for (const e of evs) events.push(e)
        records++
      }
      if (got === 0) {
        throw new Error(`agentlog: session ${JSON.stringify(id)}: reading ${subject} stopped at stream seq ${from}, before its last record at stream seq ${upTo}`)
      }
    }
    return { events, records }
  }

  /** agentlog_blobs, opened once. */
  private blobStore(s: Store): Promise<ObjectStore> {
    s.blobs ??= new Objm(s.js).open(this.names.blobsBucket).catch((err: unknown) => {
      s.blobs = undefined
      throw new Error(`Object Store bucket ${this.names.blobsBucket} (offloaded events) does not exist or cannot be read (run \`agentlog provision\`): ${(err as Error).message}`, { cause: err })
    })
    return s.blobs
  }

  /**
   * The events of a decoded record with its offloaded events read from agentlog_blobs (their
   * size and SHA-256 checked against the record's Agentlog-Blob values). A blob that is missing
   * or differs is an AgentlogWireError (rule record-blob) naming the session and the seq.
   */
  private async resolve(s: Store, id: string, tok: string, dec: ReturnType<typeof decodeRecord>, streamSeq: number): Promise<WireEvent[]> {
    if (dec.blobs.length === 0) return dec.events
    const os = await this.blobStore(s)
    for (const { index, ref } of dec.blobs) {
      const name = blobName(tok, ref)
      const where = `record at stream seq ${streamSeq}: the event's blob ${name} in ${this.names.blobsBucket}`
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

  /**
   * Store the lines of events too large for any record of this window as blobs (new objects,
   * PROTOCOL.md §4.1) and return them with the lines left empty; an event over maxEventBytes is
   * refused first, so nothing is stored for a refused batch. budget is the body bytes a record
   * of the window holds.
   */
  private async offload(s: Store, id: string, tok: string, events: readonly WireEvent[], lines: EncodedLines, budget: number): Promise<{ lines: EncodedLines; blobs: { index: number; ref: BlobRef }[] }> {
    const big: number[] = []
    for (let i = 0; i < lines.length; i++) {
      const len = lines.bytes(i)
      if (len <= budget && len <= this.maxEventBytes) continue
      if (len > this.maxEventBytes) {
        throw new AgentlogWireError(id, events[i]!.seq, 'event-too-large', `the event is ${len} bytes encoded, the max event size is ${this.maxEventBytes} bytes (maxEventBytes)`)
      }
      if (len > budget) big.push(i)
    }
    if (big.length === 0) return { lines, blobs: [] }
    await this.blobStore(s) // the bucket exists (else a clear error)
    const bucket = this.names.blobsBucket
    const chunk = Math.max(Math.min(128 * 1024, s.maxPayload - 1024), 512)
    const b64url = (b: Buffer) => b.toString('base64').replace(/\+/g, '-').replace(/\//g, '_')
    const blobs: { index: number; ref: BlobRef }[] = []
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
        throw new Error(`agentlog: session ${JSON.stringify(id)} seq ${ref.seq}: store the event's ${ref.size} bytes as blob ${name} in ${this.names.blobsBucket}: ${(err as Error).message}`, { cause: err })
      }
      blobs.push({ index: i, ref })
    }
    return { lines: lines.emptied(big), blobs }
  }

  async readStoredRevision(id: SessionId, signal?: AbortSignal): Promise<SessionPersistenceRevision | undefined> {
    signal?.throwIfAborted()
    const s = await this.ready
    const n = await this.recordCount(s, this.subjectOf(s, token(id)))
    signal?.throwIfAborted()
    return n === 0 ? undefined : this.revision(s, n)
  }

  async appendBatch(meta: SessionHeader, events: readonly SessionEvent[], isMaterialized: boolean): Promise<void> {
    if (events.length === 0) return
    const id = meta.id
    const first = events[0]!.seq
    const last = events[events.length - 1]!.seq
    // The coordinator hands over detached, validated lossless-JSON snapshots; encodeLines still
    // refuses what JSON.stringify cannot encode, naming the session, seq and type.
    const lines = EncodedLines.of(id, events as readonly WireEvent[])
    let acked = false
    try {
      await this.appendEncoded(meta, events as readonly WireEvent[], isMaterialized, lines)
      acked = true
    } finally {
      lines.release(acked)
    }
  }

  private async appendEncoded(meta: SessionHeader, events: readonly WireEvent[], isMaterialized: boolean, lines: EncodedLines): Promise<void> {
    const id = meta.id
    const first = events[0]!.seq
    const last = events[events.length - 1]!.seq
    const s = await this.ready
    if (this.closed) throw new Error(`agentlog: session ${JSON.stringify(id)} seqs ${first}..${last}: the backend is closed`)
    const tok = token(id)
    try {
      let tail: Tail
      if (!isMaterialized) {
        if (first !== 0) {
          throw new AgentlogWireError(id, first, 'record-continue', 'the first record of a session must start at seq 0')
        }
        // The metadata create and the lease take one round trip together; a lease taken for a
        // session whose create is refused is given back at once.
        const [m, l] = await Promise.allSettled([this.createMeta(s, meta, tok), this.ensureLease(s, id, tok, first, last)])
        if (m.status === 'rejected') {
          if (l.status === 'fulfilled') await this.dropLease(s, id, tok)
          throw m.reason
        }
        if (l.status === 'rejected') throw l.reason
        tail = { streamSeq: 0, nextSeq: 0, msgId: '' }
      } else {
        await this.ensureLease(s, id, tok, first, last)
        if (!this.incarnations.has(id)) this.incarnations.set(id, (await this.readMeta(s, tok))?.incarnation ?? '')
        tail = this.tails.get(id) ?? await this.leaderTail(s, id, tok)
      }
      if (tail.nextSeq !== first) {
        throw new AgentlogConflictError(id, first, last, tail.streamSeq,
          `the stored log's next seq is ${tail.nextSeq}, not ${first}`)
      }
      await this.write(s, id, tok, tail.streamSeq, events, lines)
    } catch (err) {
      this.report(s, id, tok, first, last, err as Error)
      throw err
    }
  }

  /**
   * Register the session's metadata: a KV create by hand (PROTOCOL.md §6), so that the entry
   * carries a fresh incarnation in its Agentlog-Incarnation header. A retry of our own create
   * (same header line, same incarnation) passes, and so does a retry of our own first record.
   */
  private async createMeta(s: Store, meta: SessionHeader, tok: string): Promise<void> {
    const value = headerLine(meta)
    const id = meta.id
    const bucket = this.names.sessionsBucket
    const subject = `$KV.${bucket}.${tok}`
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
        const code = err instanceof JetStreamApiError ? err.code : undefined
        if (code !== ERR_WRONG_LAST_SEQUENCE && code !== ERR_WRONG_LAST_SEQUENCE_CONSTANT) {
          throw new Error(`agentlog: create session ${JSON.stringify(id)} (key ${tok} in KV bucket ${bucket}): ${(err as Error).message}`, { cause: err })
        }
        const entry = await this.readMeta(s, tok)
        if (entry === null && attempt === 0) {
          // The key's last entry is a delete marker (the metadata of an unwritten session was
          // removed): create over it.
          const m = await s.jsm.streams.getMessage(`KV_${bucket}`, { last_by_subj: subject })
          if (m !== null) { expect = m.seq; continue }
        }
        if (entry === null) throw new Error(`agentlog: create session ${JSON.stringify(id)} (key ${tok} in KV bucket ${bucket}): ${(err as Error).message}`, { cause: err })
        const ours = entry.value === value && entry.incarnation === inc
        const last = await this.lastRecord(s, this.subjectOf(s, tok))
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
   * Write events as one guarded record (or an atomic batch of records when too big), and resolve
   * a lost ack, a dedupe or a guard conflict by reading the tail (PROTOCOL.md §5).
   */
  private async write(s: Store, id: string, tok: string, guard: number, events: readonly WireEvent[], lines: EncodedLines): Promise<void> {
    const subject = this.subjectOf(s, tok)
    for (;;) {
      const first = events[0]!.seq
      const last = events[events.length - 1]!.seq
      const msgId = this.msgIdOf(id, tok, first)
      let ack: PubAck
      try {
        ack = await this.publish(s, id, tok, subject, guard, msgId, events, lines)
      } catch (err) {
        const code = err instanceof JetStreamApiError ? err.code : undefined
        if (code !== ERR_WRONG_LAST_SEQUENCE && code !== ERR_WRONG_LAST_SEQUENCE_CONSTANT && code !== ERR_BATCH_DUPLICATE_MSG_ID) {
          if (err instanceof AgentlogWireError || err instanceof AgentlogConflictError) throw err
          throw new Error(`agentlog: append to session ${JSON.stringify(id)} seqs ${first}..${last} (expected last stream seq ${guard}): ${(err as Error).message}`, { cause: err })
        }
        const tail = await this.leaderTail(s, id, tok)
        const stored = ownTail(tail, msgId, first, last)
        if (stored < 0) {
          throw new AgentlogConflictError(id, first, last, guard,
            `the tail record is at stream seq ${tail.streamSeq} (Nats-Msg-Id ${JSON.stringify(tail.msgId)}, next seq ${tail.nextSeq})`, { cause: err })
        }
        ack = { stream: this.names.stream, seq: tail.streamSeq, duplicate: true } as PubAck
        if (stored < events.length) {
          // An earlier try stored a prefix of this batch: write the rest after it.
          this.tails.set(id, { streamSeq: tail.streamSeq, nextSeq: tail.nextSeq, msgId: tail.msgId })
          guard = tail.streamSeq
          events = events.slice(stored)
          lines = lines.from(stored)
          continue
        }
      }
      if (ack.duplicate) {
        if (ack.seq <= guard) {
          throw new AgentlogConflictError(id, first, last, guard, `Nats-Msg-Id ${JSON.stringify(msgId)} matched stream seq ${ack.seq}, at or before the guard`)
        }
        const tail = await this.leaderTail(s, id, tok)
        const stored = tail.streamSeq === ack.seq ? ownTail(tail, msgId, first, last) : -1
        if (stored < 0) {
          throw new AgentlogConflictError(id, first, last, guard,
            `Nats-Msg-Id ${JSON.stringify(msgId)} was deduplicated as stream seq ${ack.seq}, but the tail record is stream seq ${tail.streamSeq} (next seq ${tail.nextSeq})`)
        }
        this.tails.set(id, { streamSeq: tail.streamSeq, nextSeq: tail.nextSeq, msgId: tail.msgId })
        if (stored < events.length) {
          guard = tail.streamSeq
          events = events.slice(stored)
          lines = lines.from(stored)
          continue
        }
        return
      }
      this.tails.set(id, { streamSeq: ack.seq, nextSeq: last + 1, msgId })
      return
    }
  }

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
    let off: { lines: EncodedLines; blobs: { index: number; ref: BlobRef }[] } = { lines, blobs: [] }
    if (lines.longest() > Math.min(budget, this.maxEventBytes)) {
      off = await this.offload(s, id, tok, events, lines, budget)
      if (off.blobs.length > 0 && Date.now() - started > BLOB_MAX_AGE_AT_PUBLISH_MS) off = await this.offload(s, id, tok, events, lines, budget)
    }
    lines = off.lines
    const blobAt = new Map(off.blobs.map(b => [b.index, b.ref]))
    const withBlobs = (h: [string, string][], a: number, b: number): [string, string][] => {
      if (blobAt.size === 0) return h // the common case: no offloaded event
      for (let i = a; i < b; i++) {
        const ref = blobAt.get(i)
        if (ref === undefined) continue
        const f = h.findIndex(([k]) => k === HEADER_FORMAT)
        h[f] = [HEADER_FORMAT, RECORD_FORMAT_BLOBS]
        h.push([HEADER_BLOB, blobHeaderValue(ref)])
      }
      return h
    }
    const pairs = withBlobs(recordHeaders(tok, first, n), 0, n)
    pairs.push([HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(guard)], [HEADER_MSG_ID, msgId])
    // One UTF-8 encoding of the whole body, written line by line into one buffer.
    const body = lines.body(0, n)
    if (headerWireSize(pairs) + body.length <= limit) {
      return s.acks.publish(subject, body, pairs)
    }
    // Split: cut into records within the limit, committed as one atomic batch (ADR-50).
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
      throw new AgentlogWireError(id, first, 'batch-too-large',
        `seqs ${first}..${events[n - 1]!.seq} need ${parts.length} records of at most ${limit} bytes, more than the ${MAX_BATCH_RECORDS} an atomic batch may hold`)
    }
    const record = (k: number): { data: Uint8Array; headers: MsgHdrs } => {
      const [a, b] = parts[k]!
      const h = withBlobs(recordHeaders(tok, events[a]!.seq, b - a), a, b)
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
    return { stream: ack.stream, seq: ack.seq, duplicate: false } as PubAck
  }

  /** Publish an agent/error report (best effort; never a session event). */
  private report(s: Store, id: string, tok: string, firstSeq: number, lastSeq: number, err: Error): void {
    try {
      if (s.nc.isClosed()) return
      s.nc.publish(`${this.names.errorsPrefix}.${tok}`, JSON.stringify({
        type: 'agent/error', session: id, firstSeq, lastSeq, error: err.message, time: Date.now(), writerId: this.writerId,
      }))
    } catch { /* a report is best effort */ }
  }

  // --- writer leases (PROTOCOL.md §5.5) ---

  private leaseValue(id: string, since: number): string {
    return JSON.stringify({ session: id, writer: this.writerId, host: HOSTNAME, pid: process.pid, since, ttlMs: this.leaseTtlMs })
  }

  private ttlHeader(): string {
    return `${Math.ceil(this.leaseTtlMs / 1000)}s`
  }

  /** Take this writer's lease on the session before its first write here; refuse a live one of another writer. */
  private async ensureLease(s: Store, id: string, tok: string, first: number, last: number): Promise<void> {
    if (s.writers === undefined) return
    const held = this.leases.get(id)
    if (held !== undefined) {
      if (held.lost) {
        throw new AgentlogConflictError(id, first, last, -1, `this writer's lease (key ${tok} in KV bucket ${this.names.writersBucket}) was taken over by another writer`)
      }
      held.lastWrite = Date.now()
      return
    }
    const since = Date.now()
    let rev: number
    try {
      // A create where the key has no entry yet, in one acked publish (nats.js's KV create also
      // takes over a delete marker: it is the path when this one is refused).
      rev = await s.acks.publish(`$KV.${this.names.writersBucket}.${tok}`, this.leaseValue(id, since),
        [[HEADER_EXPECTED_LAST_SUBJECT_SEQ, '0'], ['Nats-TTL', this.ttlHeader()]]).then(a => a.seq,
        () => s.writers!.create(tok, this.leaseValue(id, since), this.ttlHeader()))
    } catch (err) {
      const e = await s.writers.get(tok).catch(() => null)
      if (e === null || e.operation !== 'PUT') {
        throw new Error(`agentlog: session ${JSON.stringify(id)}: take the writer lease (key ${tok} in KV bucket ${this.names.writersBucket}): ${(err as Error).message}`, { cause: err })
      }
      let holder: Record<string, unknown> = {}
      try { holder = e.json() } catch { /* an unreadable lease is another writer's */ }
      if (holder.writer !== this.writerId) throw new AgentlogLeaseHeldError(id, first, last, holder)
      rev = e.revision // our own lease (an earlier try)
    }
    this.leases.set(id, { rev, since, lastWrite: Date.now(), lost: false })
    if (this.renewTimer === undefined) {
      this.renewTimer = setInterval(() => { void this.renewLeases() }, Math.max(250, Math.floor(this.leaseTtlMs / 4)))
      this.renewTimer.unref()
    }
  }

  /** Give back the lease on one session (only if still at its revision). */
  private async dropLease(s: Store, id: string, tok: string): Promise<void> {
    const l = this.leases.get(id)
    if (l === undefined || s.writers === undefined) return
    this.leases.delete(id)
    if (!l.lost) await s.writers.delete(tok, { previousSeq: l.rev }).catch(() => {})
  }

  /** Renew every held lease (revision-guarded); release those idle for LEASE_IDLE_MS. */
  private async renewLeases(): Promise<void> {
    const s = this.store
    if (s === undefined || s.writers === undefined || this.closed) return
    const now = Date.now()
    const bucket = this.names.writersBucket
    await Promise.all([...this.leases].map(async ([id, l]) => {
      if (l.lost) return
      const tok = token(id)
      if (now - l.lastWrite > LEASE_IDLE_MS) {
        this.leases.delete(id)
        await s.writers!.delete(tok, { previousSeq: l.rev }).catch(() => {})
        return
      }
      try {
        const ack = await s.acks.publish(`$KV.${bucket}.${tok}`, this.leaseValue(id, l.since),
          [[HEADER_EXPECTED_LAST_SUBJECT_SEQ, String(l.rev)], ['Nats-TTL', this.ttlHeader()]])
        l.rev = ack.seq
      } catch (err) {
        const code = err instanceof JetStreamApiError ? err.code : undefined
        if (code === ERR_WRONG_LAST_SEQUENCE || code === ERR_WRONG_LAST_SEQUENCE_CONSTANT) l.lost = true // taken over, or expired
      }
    }))
  }

  /** Delete the leases this writer holds (each only if still at its revision). */
  private async releaseLeases(s: Store): Promise<void> {
    if (this.renewTimer !== undefined) clearInterval(this.renewTimer)
    this.renewTimer = undefined
    if (s.writers === undefined) return
    const held = [...this.leases]
    this.leases.clear()
    await Promise.all(held.filter(([, l]) => !l.lost).map(([id, l]) => s.writers!.delete(token(id), { previousSeq: l.rev }).catch(() => {})))
  }

  async commitRepair(meta: SessionHeader, _torn: undefined, closers: readonly SessionEvent[]): Promise<void> {
    // Records are atomic: there is never a torn tail, only closers to append.
    if (closers.length > 0) await this.appendBatch(meta, closers, true)
  }

  async list(signal?: AbortSignal): Promise<SessionHeader[]> {
    signal?.throwIfAborted()
    const s = await this.ready
    return (await this.listStored(s, signal)).map(x => x.header as SessionHeader)
  }

  /** Every session with at least one record, with its metadata and record count. */
  private async listStored(s: Store, signal?: AbortSignal): Promise<{ header: ReturnType<typeof parseHeaderLine>; records: number }[]> {
    const si = await s.jsm.streams.info(this.names.stream, { subjects_filter: `${this.names.subjectPrefix}.>` } as any)
    signal?.throwIfAborted()
    const subjects = Object.entries((si.state.subjects ?? {}) as Record<string, number>)
    const out: { header: ReturnType<typeof parseHeaderLine>; records: number }[] = []
    const prefixDots = this.names.subjectPrefix.split('.').length
    let next = 0
    const worker = async () => {
      while (next < subjects.length) {
        const [subject, records] = subjects[next++]!
        const tok = subject.split('.')[prefixDots + 1]
        if (tok === undefined) continue
        let id: string
        try { id = idFromToken(tok) } catch { continue }
        const entry = await this.readMeta(s, tok)
        if (entry === null) continue
        let header: ReturnType<typeof parseHeaderLine>
        try { header = parseHeaderLine(id, entry.value) } catch { continue } // as the JSONL backend skips a bad header line
        out.push({ header, records })
      }
    }
    await Promise.all(Array.from({ length: Math.min(LIST_CONCURRENCY, subjects.length) }, worker))
    signal?.throwIfAborted()
    out.sort((a, b) => a.header.id < b.header.id ? -1 : a.header.id > b.header.id ? 1 : 0)
    return out
  }

  /** Teardown, run by the coordinator after it drained every buffered batch: drain the connection. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    const s = await this.ready.catch(() => undefined)
    if (s !== undefined && !s.nc.isClosed()) {
      await this.releaseLeases(s)
      await s.nc.drain()
      s.acks.stop(new Error('agentlog: the backend is closed'))
    }
  }
}

/**
 * A batch's event lines, encoded once into one UTF-8 buffer: line i is buf[start(i), ends[i]), and
 * the lines are joined by "\n", so any run of lines is a record body as it stands (a view, no copy).
 */
class EncodedLines {
  private constructor(private readonly buf: Buffer, private readonly ends: readonly number[], private readonly slab?: Slab) {}

  /** Validate and encode events (consecutive seqs, wire key order): see encodeLines. */
  static of(id: string, events: readonly WireEvent[]): EncodedLines {
    // The strings live only in this call, so they die young; the buffer is off the JS heap.
    const strs = encodeLines(id, events)
    // One flat string and two native calls per batch (JSON.stringify returns ropes, and a call
    // per line costs more than its bytes).
    const text = strs.join('\n')
    const n = Buffer.byteLength(text, 'utf8')
    const { buf, slab } = allocBody(n)
    buf.write(text, 0, 'utf8')
    const ends = new Array<number>(strs.length)
    let off = -1
    if (n === text.length) {
      for (let i = 0; i < strs.length; i++) ends[i] = off += strs[i]!.length + 1 // ASCII: a byte per unit
    } else {
      for (let i = 0; i < strs.length; i++) ends[i] = off += Buffer.byteLength(strs[i]!, 'utf8') + 1
    }
    return new EncodedLines(buf, ends, slab)
  }

  /**
   * The batch is over: its bytes may be reused when `acked` (every publish of them was answered,
   * so neither nats.js nor the socket holds them); otherwise they are left to the GC.
   */
  release(acked: boolean): void {
    if (this.slab !== undefined) releaseBody(this.slab, acked)
  }

  get length(): number { return this.ends.length }
  /** Bytes of the longest line. */
  longest(): number {
    let m = 0
    for (let i = 0; i < this.ends.length; i++) m = Math.max(m, this.bytes(i))
    return m
  }
  private start(i: number): number { return i === 0 ? 0 : this.ends[i - 1]! + 1 }
  /** Bytes of line i. */
  bytes(i: number): number { return this.ends[i]! - this.start(i) }
  /** Line i's bytes (a view). */
  line(i: number): Buffer { return this.buf.subarray(this.start(i), this.ends[i]) }
  /** Lines [a, b) joined by "\n" (a view). */
  body(a: number, b: number): Buffer { return this.buf.subarray(this.start(a), this.ends[b - 1]) }
  /** The lines from k on. */
  from(k: number): EncodedLines {
    const s0 = this.start(k)
    return new EncodedLines(this.buf.subarray(s0), this.ends.slice(k).map(e => e - s0)) // released with this one
  }
  /** A copy with the lines at these indexes empty (their events went to blobs). */
  emptied(indexes: readonly number[]): EncodedLines {
    const skip = new Set(indexes)
    const parts: Buffer[] = []
    const ends = new Array<number>(this.length)
    let off = 0
    for (let i = 0; i < this.length; i++) {
      if (i > 0) { parts.push(NEWLINE); off++ }
      if (!skip.has(i)) { const l = this.line(i); parts.push(l); off += l.length }
      ends[i] = off
    }
    return new EncodedLines(Buffer.concat(parts, off), ends)
  }
}

const NEWLINE = Buffer.from('\n')

/**
 * Bodies up to SLAB_MAX_PIECE bytes are cut from shared 1 MiB slabs: one ArrayBuffer per slab, not
 * per record, and a slab every body of which was acked goes back to a small pool, so the hot path
 * does not keep touching fresh pages.
 */
const SLAB_BYTES = 1 << 20
const SLAB_MAX_PIECE = SLAB_BYTES / 8
const SLAB_POOL_MAX = 8

class Slab {
  used = 0
  /** Bodies cut from it whose batch has not ended. */
  live = 0
  /** A body of it may still be held by nats.js (a publish of it went unanswered): never reused. */
  tainted = false
  pooled = false
  constructor(readonly buf: Buffer) {}
}

const slabPool: Buffer[] = []
let slab = new Slab(Buffer.allocUnsafeSlow(SLAB_BYTES))

/** An uninitialized buffer of n bytes, and the slab it was cut from (none for a large one). */
function allocBody(n: number): { buf: Buffer; slab?: Slab } {
  if (n > SLAB_MAX_PIECE) return { buf: Buffer.allocUnsafeSlow(n) }
  if (slab.used + n > SLAB_BYTES) {
    const full = slab
    slab = new Slab(slabPool.pop() ?? Buffer.allocUnsafeSlow(SLAB_BYTES))
    recycle(full)
  }
  const buf = slab.buf.subarray(slab.used, slab.used + n)
  slab.used += (n + 7) & ~7
  slab.live++
  return { buf, slab }
}

function releaseBody(sl: Slab, acked: boolean): void {
  sl.live--
  if (!acked) sl.tainted = true
  if (sl !== slab) recycle(sl)
}

/** Pool a slab that is no longer cut from, once none of its bodies is in use. */
function recycle(sl: Slab): void {
  if (sl.live > 0 || sl.tainted || sl.pooled || slabPool.length >= SLAB_POOL_MAX) return
  sl.pooled = true
  slabPool.push(sl.buf)
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

export default AgentlogSessionPersistence

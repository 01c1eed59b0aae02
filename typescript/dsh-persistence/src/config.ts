/**
 * The plugin config: its types and schema, the defaults, the settings resolved from it, and the
 * NATS connection options built from it and the environment.
 */
import { readFileSync } from 'node:fs'
import z from '@deepseek-ai/schemastery'
import {
  DEFAULT_PREPARED_SESSION_CACHE_SIZE, DEFAULT_WRITE_BATCH_MAX_DELAY_MS, MAX_WRITE_BATCH_DELAY_MS,
} from '@deepseek-ai/dsh-session-persistence'
import {
  credsAuthenticator, nkeyAuthenticator, nuid, type Authenticator, type NodeConnectionOptions,
} from '@nats-io/transport-node'
import type { MetricsConfig } from './metrics.js'
import {
  BLOBS_BUCKET, BLOB_PREFIX, BLOB_STREAM, DEFAULT_MAX_EVENT_BYTES, ERRORS_PREFIX, ERRORS_STREAM, SESSIONS_BUCKET, STREAM_NAME, SUBJECT_PREFIX,
  WRITERS_BUCKET,
} from './wire.js'

/** Default TTL of a writer lease, ms (the Go publisher's DefaultLeaseTTL). */
export const DEFAULT_LEASE_TTL_MS = 10_000

/** Default timeout of one JetStream request, ms. */
const DEFAULT_REQUEST_TIMEOUT_MS = 10_000

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
  /** The legacy Object Store bucket of offloaded events (format 2 records): read only. */
  blobsBucket?: string
  /** The write-once stream of offloaded events (format 3 records) and its subject prefix. */
  blobStream?: string
  blobPrefix?: string
}

/** What `provision` creates a missing stream and buckets with. */
export interface ProvisionConfig { partitions?: number; maxMsgSize?: number; replicas?: number }

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
  /**
   * JetStream domain of the agentlog deployment, when it is not the connected server's own: the
   * hub's domain for a writer connected to a leaf node (`agentlog --js-domain`, deploy/leaf-node).
   * JetStream requests then go to `$JS.<domain>.API.>`, and the hand-made KV puts to
   * `$JS.<domain>.API.$KV.<bucket>.<key>` (PROTOCOL.md). Default: none.
   */
  domain?: string
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
  provision?: boolean | ProvisionConfig
  /**
   * Other names than agentlog's (for isolated test namespaces). The Go stack reads only the
   * defaults: sessions written under other names are invisible to `agentlog` commands.
   */
  names?: NamesConfig
  /**
   * Prometheus metrics of the writes, under the Go publisher's names (agentlog_publisher_*): off
   * unless set. `{ listen: '127.0.0.1:9464' }` serves them at /metrics; `{ defaultRegistry: true }`
   * puts them on prom-client's default registry; `true` keeps them on the plugin's own registry
   * (`backend.metrics.registry`).
   */
  metrics?: boolean | MetricsConfig
}

export const ConfigSchema: z<Config> = z.object({
  servers: z.union([z.string(), z.array(z.string())]).required(),
  name: z.string(),
  credsFile: z.string(),
  nkey: z.string(),
  nkeyFile: z.string(),
  user: z.string(),
  pass: z.string(),
  token: z.string(),
  tls: z.object({ ca: z.string(), cert: z.string(), key: z.string(), handshakeFirst: z.boolean() }),
  domain: z.string(),
  writerId: z.string(),
  writeBatchMaxDelayMs: z.number().step(1).min(1).max(MAX_WRITE_BATCH_DELAY_MS).default(DEFAULT_WRITE_BATCH_MAX_DELAY_MS),
  preparedSessionCacheSize: z.number().step(1).min(1).default(DEFAULT_PREPARED_SESSION_CACHE_SIZE),
  requestTimeoutMs: z.number().min(1),
  leaseTtlMs: z.number().step(1).min(0),
  maxEventBytes: z.number().step(1).min(1),
  provision: z.union([z.boolean(), z.object({ partitions: z.number(), maxMsgSize: z.number(), replicas: z.number() })]),
  names: z.object({ stream: z.string(), writersBucket: z.string(), subjectPrefix: z.string(), sessionsBucket: z.string(), errorsStream: z.string(), errorsPrefix: z.string(), blobsBucket: z.string(), blobStream: z.string(), blobPrefix: z.string() }),
  metrics: z.union([z.boolean(), z.object({ listen: z.string(), defaultRegistry: z.boolean() })]),
})

/** A config with its defaults applied and checked. */
export interface Settings {
  /** Prefix of this instance's Nats-Msg-Id values. */
  writerId: string
  names: Required<NamesConfig>
  maxEventBytes: number
  /** 0: no leases. */
  leaseTtlMs: number
  requestTimeoutMs: number
  preparedSessionCacheSize: number
  writeBatchMaxDelayMs: number
  /** JetStream domain (config.domain, else AGENTLOG_JS_DOMAIN, else NATS_JS_DOMAIN); undefined: none. */
  domain?: string
}

/** Apply the defaults to a config; throws an Error naming the field for a bad one. */
export function parseConfig(config: Config): Settings {
  if (config === undefined || config.servers === undefined || (Array.isArray(config.servers) && config.servers.length === 0)) {
    throw new Error('agentlog session persistence: config.servers is required (e.g. "nats://127.0.0.1:4222")')
  }
  const writerId = config.writerId ?? nuid.next()
  if (/[\s\x00-\x1f\x7f]/.test(writerId) || writerId === '') {
    throw new Error(`agentlog session persistence: writerId ${JSON.stringify(writerId)} must be non-empty, without whitespace or control characters (it goes into Nats-Msg-Id)`)
  }
  const leaseTtlMs = config.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS
  if (leaseTtlMs !== 0 && leaseTtlMs < 1000) {
    throw new Error(`agentlog session persistence: leaseTtlMs ${leaseTtlMs}: want 0 (no leases) or at least 1000`)
  }
  const domain = config.domain ?? (process.env.AGENTLOG_JS_DOMAIN || process.env.NATS_JS_DOMAIN || undefined)
  if (domain !== undefined && domain !== '' && /[.\s*>]/.test(domain)) {
    throw new Error(`agentlog session persistence: domain ${JSON.stringify(domain)}: a JetStream domain is one subject token (no '.', '*', '>' or white space)`)
  }
  return {
    domain: domain === '' ? undefined : domain,
    writerId,
    names: {
      stream: config.names?.stream ?? STREAM_NAME,
      subjectPrefix: config.names?.subjectPrefix ?? SUBJECT_PREFIX,
      sessionsBucket: config.names?.sessionsBucket ?? SESSIONS_BUCKET,
      errorsStream: config.names?.errorsStream ?? ERRORS_STREAM,
      errorsPrefix: config.names?.errorsPrefix ?? ERRORS_PREFIX,
      writersBucket: config.names?.writersBucket ?? WRITERS_BUCKET,
      blobsBucket: config.names?.blobsBucket ?? BLOBS_BUCKET,
      blobStream: config.names?.blobStream ?? BLOB_STREAM,
      blobPrefix: config.names?.blobPrefix ?? BLOB_PREFIX,
    },
    maxEventBytes: config.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES,
    leaseTtlMs,
    requestTimeoutMs: config.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS,
    preparedSessionCacheSize: config.preparedSessionCacheSize ?? DEFAULT_PREPARED_SESSION_CACHE_SIZE,
    writeBatchMaxDelayMs: config.writeBatchMaxDelayMs ?? DEFAULT_WRITE_BATCH_MAX_DELAY_MS,
  }
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

/** The nats.js connection options of a config (credentials and TLS files read now). */
export function connectOptions(c: Config): NodeConnectionOptions {
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

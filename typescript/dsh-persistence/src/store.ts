/**
 * The store: one connection to an agentlog deployment, its stream and buckets checked at open, and
 * the reads every path shares (a session's subject, last record, leader tail, record count and
 * metadata entry).
 */
import { SessionPersistenceRevision } from '@deepseek-ai/dsh-session-persistence'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import {
  jetstream, jetstreamManager, type JetStreamClient, type JetStreamManager, type StoredMsg,
} from '@nats-io/jetstream'
import { Kvm, type KV } from '@nats-io/kv'
import { AckMux } from './ackmux.js'
import { connectOptions, type Config, type NamesConfig, type Settings } from './config.js'
import { isNoMessageFound } from './errors.js'
import { provision } from './provision.js'
import {
  HEADER_INCARNATION, HEADER_INCOMPLETE, HEADER_MSG_ID, META_FORMAT, META_PARTITIONS, STORE_FORMAT, decodeRecord, partition,
} from './wire.js'

/**
 * A session's tail as a writer knows it: its last record's stream seq and Nats-Msg-Id, the next
 * event seq, and (when known) the first seq of that record.
 */
export interface Tail { streamSeq: number; nextSeq: number; msgId: string; firstSeq?: number }

/**
 * The connection's state as the writer needs it: whether it is up, and a generation that changes
 * at every disconnect and reconnect (a server restart may have lost acknowledged records).
 */
export class ConnState {
  gen = 0
  connected = true
  private waiters: (() => void)[] = []

  /** Follow nc's status events until it closes. */
  constructor(nc: NatsConnection) {
    void (async () => {
      for await (const st of nc.status()) {
        if (st.type === 'disconnect') { this.connected = false; this.gen++ }
        else if (st.type === 'reconnect') { this.connected = true; this.gen++; this.wake() }
      }
    })().catch(() => {}).finally(() => { this.connected = false; this.gen++; this.wake() })
  }

  private wake(): void {
    const w = this.waiters
    this.waiters = []
    for (const f of w) f()
  }

  /** Resolves true once connected (at once if connected), false after ms without a connection. */
  waitConnected(ms: number): Promise<boolean> {
    if (this.connected) return Promise.resolve(true)
    return new Promise(ok => {
      const t = setTimeout(() => { this.waiters = this.waiters.filter(f => f !== done); ok(this.connected) }, ms)
      const done = () => { clearTimeout(t); ok(this.connected) }
      this.waiters.push(done)
    })
  }
}

/** A session's metadata entry in agentlog_sessions: the header line and the incarnation. */
/** `completeAt`: the Agentlog-Incomplete mark of a fork child being written (0: none; PROTOCOL.md). */
export interface MetaEntry { value: string; incarnation: string; seq: number; completeAt: number }

/** The data fields of T (no methods). */
type Fields<T> = { [K in keyof T as T[K] extends (...args: never[]) => unknown ? never : K]: T[K] }

/** The resolved connection to one agentlog store. */
export class Store {
  declare readonly nc: NatsConnection
  declare readonly js: JetStreamClient
  declare readonly jsm: JetStreamManager
  declare readonly names: Required<NamesConfig>
  /** Put before `$KV.<bucket>.<key>` by the hand-made KV puts: `$JS.<domain>.API.` with a domain, as nats.js's KV does; else ''. */
  declare readonly kvPutPrefix: string
  /** agentlog_writers; undefined when this writer takes no leases. */
  declare readonly writers?: KV
  declare readonly partitions: number
  declare readonly maxMsgSize: number
  /** The server's max payload, bytes (a blob chunk is one message). */
  declare readonly maxPayload: number
  /** The stream's identity, `<name>@<created>`, in every revision. */
  declare readonly source: string
  /** Acked publishes of records and lease renewals, without nats.js's per-request machinery. */
  declare readonly acks: AckMux
  /** The connection's state (up or not, reconnect generation). */
  declare readonly conn: ConnState
  /** The timeout of one JetStream request, ms. */
  declare readonly timeoutMs: number
  private constructor(f: Fields<Store>) {
    Object.assign(this, f)
  }

  /**
   * Connect, provision when the config asks, and check the stream (agentlog metadata, subjects)
   * and the buckets; an Error saying what is missing (and to run `agentlog provision`) otherwise.
   */
  static async open(config: Config, settings: Settings): Promise<Store> {
    let nc: NatsConnection
    const servers = Array.isArray(config.servers) ? config.servers.join(',') : config.servers
    try {
      nc = await connect(connectOptions(config))
    } catch (err) {
      throw new Error(`agentlog session persistence: cannot connect to NATS at ${servers}: ${(err as Error).message}`, { cause: err })
    }
    try {
      const timeout = settings.requestTimeoutMs
      const domain = settings.domain
      const js = jetstream(nc, { timeout, domain })
      const jsm = await jetstreamManager(nc, { timeout, domain })
      const n = settings.names
      if (config.provision) {
        await provision(nc, jsm, n, typeof config.provision === 'object' ? config.provision : {}, settings.leaseTtlMs > 0)
      }
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
      try {
        const sessions = await new Kvm(js).open(n.sessionsBucket)
        await sessions.status()
      } catch (err) {
        throw new Error(`KV bucket ${n.sessionsBucket} does not exist or cannot be read (run \`agentlog provision\`): ${(err as Error).message}`, { cause: err })
      }
      let writers: KV | undefined
      if (settings.leaseTtlMs > 0) {
        try {
          writers = await new Kvm(js).open(n.writersBucket)
          await writers.status()
        } catch (err) {
          throw new Error(`KV bucket ${n.writersBucket} (writer leases) does not exist or cannot be read (run \`agentlog provision\`, or set leaseTtlMs: 0): ${(err as Error).message}`, { cause: err })
        }
      }
      return new Store({
        nc, js, jsm, kvPutPrefix: domain === undefined ? '' : `$JS.${domain}.API.`, names: n, writers, partitions: parts, maxMsgSize, maxPayload, source: `${n.stream}@${si.created}`, acks: new AckMux(nc, timeout), conn: new ConnState(nc), timeoutMs: timeout,
      })
    } catch (err) {
      await nc.close().catch(() => {})
      throw new Error(`agentlog session persistence (${servers}): ${(err as Error).message}`, { cause: err })
    }
  }

  /** The subject a hand-made put of key in KV bucket goes to (kvPutPrefix, then `$KV.<bucket>.<key>`). */
  kvPutSubject(bucket: string, key: string): string {
    return `${this.kvPutPrefix}$KV.${bucket}.${key}`
  }

  /** The subject of the session with this token: `<prefix>.<partition>.<token>`. */
  subject(tok: string): string {
    return `${this.names.subjectPrefix}.${partition(tok, this.partitions)}.${tok}`
  }

  /** The revision of a session of this many records: stream identity plus record count. */
  revision(records: number): SessionPersistenceRevision {
    return SessionPersistenceRevision(`agentlog:${this.source}:${records}`)
  }

  /** The revision of an archived session (no hot record): stream identity plus archive id. */
  archiveRevision(archiveId: string): SessionPersistenceRevision {
    return SessionPersistenceRevision(`agentlog:${this.source}:archive:${archiveId}`)
  }

  /** Direct get of the session's last record (null when it has none). */
  lastRecord(subject: string): Promise<StoredMsg | null> {
    return this.jsm.direct.getMessage(this.names.stream, { last_by_subj: subject })
  }

  /**
   * Leader get (STREAM.MSG.GET) of the session's last record (null when it has none): never stale
   * on R>1, so a read bounded by it holds every record acked before it began.
   */
  async leaderLastRecord(subject: string): Promise<StoredMsg | null> {
    try {
      return await this.jsm.streams.getMessage(this.names.stream, { last_by_subj: subject })
    } catch (err) {
      if (isNoMessageFound(err)) return null
      throw err
    }
  }

  /** Leader get (STREAM.MSG.GET) of the session's last record: never stale on R>1. */
  async leaderTail(id: string, tok: string): Promise<Tail> {
    const subject = this.subject(tok)
    let m: StoredMsg | null
    try {
      m = await this.jsm.streams.getMessage(this.names.stream, { last_by_subj: subject })
    } catch (err) {
      if (isNoMessageFound(err)) m = null
      else throw new Error(`agentlog: session ${JSON.stringify(id)}: read the tail (subject ${subject}) from the stream leader: ${(err as Error).message}`, { cause: err })
    }
    if (m === null) return { streamSeq: 0, nextSeq: 0, msgId: '' }
    const { info } = decodeRecord(k => m.header.values(k), m.string(), m.seq)
    return { streamSeq: m.seq, nextSeq: info.firstSeq + info.count, msgId: m.header.get(HEADER_MSG_ID), firstSeq: info.firstSeq }
  }

  /**
   * Leader get (STREAM.MSG.GET) of the record at stream seq seq, as a Tail: null when the stream
   * has no message there, or one of another subject (another session's record).
   */
  async recordAt(id: string, tok: string, seq: number): Promise<Tail | null> {
    const subject = this.subject(tok)
    let m: StoredMsg | null
    try {
      m = await this.jsm.streams.getMessage(this.names.stream, { seq })
    } catch (err) {
      if (isNoMessageFound(err)) return null
      throw new Error(`agentlog: session ${JSON.stringify(id)}: read stream seq ${seq} from the stream leader: ${(err as Error).message}`, { cause: err })
    }
    if (m === null || m.subject !== subject) return null
    const msgId = m.header?.get(HEADER_MSG_ID) ?? ''
    try {
      const { info } = decodeRecord(k => m.header.values(k), m.string(), m.seq)
      return { streamSeq: m.seq, nextSeq: info.firstSeq + info.count, msgId, firstSeq: info.firstSeq }
    } catch {
      return { streamSeq: m.seq, nextSeq: -1, msgId } // not a record this writer wrote
    }
  }

  /** Records of the session's subject (stream info with a subject filter); 0 when none. */
  async recordCount(subject: string): Promise<number> {
    const si = await this.jsm.streams.info(this.names.stream, { subjects_filter: subject })
    return si.state.subjects?.[subject] ?? 0
  }

  /** Direct get of the session's metadata entry (null when absent or deleted). */
  async readMeta(tok: string): Promise<MetaEntry | null> {
    const bucket = this.names.sessionsBucket
    const m = await this.jsm.direct.getMessage(`KV_${bucket}`, { last_by_subj: `$KV.${bucket}.${tok}` })
    if (m === null) return null
    const op = m.header?.get('KV-Operation') ?? ''
    if (op === 'DEL' || op === 'PURGE' || (m.header?.get('Nats-Marker-Reason') ?? '') !== '') return null
    const mark = Number(m.header?.get(HEADER_INCOMPLETE) ?? '')
    return { value: m.string(), incarnation: m.header?.get(HEADER_INCARNATION) ?? '', seq: m.seq, completeAt: Number.isSafeInteger(mark) && mark > 0 ? mark : 0 }
  }
}

// npm run bench: the agentlog backend against a no-op backend behind the same coordinator (the
// "seam"), the reference's JSONL backend, and raw nats.js per-event async publishing.
//
//   API path:  persistence.create + one persistence.append of all of a session's events, per session
//   live path: dsh's SessionStore: session.append event by event, the coordinator's 200 ms window
//              batching them, then ctx.sessions.flush
//
// Defaults: 1,000 sessions × 200 events of 512 bytes (BENCH_SESSIONS, BENCH_EVENTS, BENCH_SIZE), in
// BENCH_ROUNDS (3) rounds: each round runs the three backends on each path, the order rotated from
// round to round, and the summary gives each ratio's median over the rounds (one run on a shared
// 2-core machine moved the live ratio by ±0.1), with every round's ratios beside it.
// AGENTLOG_NATS_URL attaches to a running server; otherwise the bench builds ./cmd/agentlog and
// runs `agentlog dev --projectors 0` in a temp dir. The agentlog sessions go to an isolated
// namespace (a stream and bucket of their own, removed afterwards) unless BENCH_DEFAULT_NAMES=1.
// Run with Node >= 22.19 (npm run puts the node@22 devDependency first on PATH); needs `npm run build`.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { Context, type Fiber } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import type { SessionEvent, SessionHeader } from '@deepseek-ai/dsh-session'
import {
  PersistenceCoordinator, SessionPersistence, SessionPersistenceRevision,
  type PersistenceBackend, type StoredPrefix,
} from '@deepseek-ai/dsh-session-persistence'
import JsonlSessionPersistence from '@deepseek-ai/dsh-session-persistence-jsonl'
import { connect, type NatsConnection } from '@nats-io/transport-node'
import { jetstream, jetstreamManager } from '@nats-io/jetstream'
import AgentlogSessionPersistence from '../lib/index.js'

const SESSIONS = Number(process.env.BENCH_SESSIONS ?? 1000)
const EVENTS = Number(process.env.BENCH_EVENTS ?? 200)
const SIZE = Number(process.env.BENCH_SIZE ?? 512)
const API_CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 64)
/** Rounds; each runs every backend on both paths, in an order rotated by round. Reported: medians. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 3))
const repoRoot = resolve(import.meta.dirname, '../../..')

// --- events: flat strings of the right size -------------------------------------------------

/**
 * n bytes of padding as a flat string, as text decoded from the network is. V8 builds
 * String.prototype.repeat's result as a rope (a tree of concatenations), which costs every reader
 * that must flatten it a copy: on its first JSON.stringify a 382-byte rope took 3× as long as a
 * flat string. Decoding bytes gives a flat one.
 */
function flatPadding(n: number): string {
  return Buffer.alloc(n, 0x78).toString('latin1')
}

/** The data of a text-delta chunk whose encoded event line is SIZE bytes at seq `seq`. */
function chunkData(seq: number, time: number): Record<string, unknown> {
  const base = JSON.stringify({ type: 'assistant/chunk', seq, time, data: { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text: '' } } })
  const n = Math.max(0, SIZE - base.length)
  return { turn: 1, step: 1, chunk: { type: 'text-delta', index: 0, text: flatPadding(n) } }
}

/** One session's events: an open turn and step, chunks, then step/end and turn/end. */
function sessionEvents(t0: number): SessionEvent[] {
  const out: SessionEvent[] = []
  for (let seq = 0; seq < EVENTS; seq++) {
    const time = t0 + seq
    let e: any
    if (seq === 0) e = { type: 'turn/start', seq, time, data: { turn: 1 } }
    else if (seq === 1) e = { type: 'step/start', seq, time, data: { turn: 1, step: 1 } }
    else if (seq === EVENTS - 2) e = { type: 'step/end', seq, time, data: { turn: 1, step: 1 } }
    else if (seq === EVENTS - 1) e = { type: 'turn/end', seq, time, data: { turn: 1, reason: { kind: 'completed' } } }
    else e = { type: 'assistant/chunk', seq, time, data: chunkData(seq, time) }
    out.push(e)
  }
  return out
}

// --- the seam: a no-op backend behind the same coordinator ----------------------------------

class NoopPersistence extends SessionPersistence implements PersistenceBackend<never> {
  static inject = ['sessions']
  override readonly supportsRawArtifacts = false
  override readonly name = 'session-persistence-noop'
  private readonly coordinator: PersistenceCoordinator<never>
  private readonly counts = new Map<string, number>()
  constructor(ctx: Context, config: { writeBatchMaxDelayMs?: number } = {}) {
    super(ctx)
    this.coordinator = new PersistenceCoordinator<never>(this.ctx, this, {
      preparedSessionCacheSize: 5, writeBatchMaxDelayMs: config.writeBatchMaxDelayMs ?? 200,
    })
  }
  locate() { return undefined }
  create(m: SessionHeader) { return this.coordinator.create(m) }
  append(id: SessionId, events: readonly SessionEvent[]) { return this.coordinator.append(id, events) }
  override prepare(id: SessionId, signal?: AbortSignal) { return this.coordinator.prepare(id, signal) }
  load(id: SessionId) { return this.coordinator.load(id) }
  inspect(id: SessionId, signal?: AbortSignal) { return this.coordinator.inspect(id, signal) }
  readFrom(id: SessionId, fromSeq: number, signal?: AbortSignal) { return this.coordinator.readFrom(id, fromSeq, signal) }
  async loadStored(): Promise<StoredPrefix<never> | undefined> { return undefined }
  async readStoredRevision(id: SessionId) {
    const n = this.counts.get(id)
    return n === undefined ? undefined : SessionPersistenceRevision(`noop:${n}`)
  }
  async appendBatch(m: SessionHeader, events: readonly SessionEvent[]) {
    this.counts.set(m.id, (this.counts.get(m.id) ?? 0) + events.length)
  }
  async commitRepair() {}
  async list() { return [] }
  async listSnapshots() { return [] }
}

// --- measurement ------------------------------------------------------------------------------

interface Result { backend: string; path: string; events: number; seconds: number; cpuSeconds?: number; eventsPerSec: number; p99BatchMs?: number; p99FlushMs?: number; records?: number }

function p99(xs: number[]): number {
  if (xs.length === 0) return 0
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.99))]!
}

/** This process's CPU seconds (user + system) since c0. */
function cpuSince(c0: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(c0)
  return (d.user + d.system) / 1e6
}

/**
 * Wrap appendBatch to time each durable write. The wrapper goes on the instance behind cordis's
 * context proxy (`ctx.sessionPersistence`), which is the object the coordinator calls: bound to the
 * proxy, every `this.x` inside appendBatch would pay a proxy trap that production never pays.
 */
function timeBatches(service: any, into: number[]): void {
  const backend = service[Symbol.for('cordis.original')] ?? service
  const orig = backend.appendBatch.bind(backend)
  backend.appendBatch = async (...args: unknown[]) => {
    const t = performance.now()
    try { return await orig(...args) } finally { into.push(performance.now() - t) }
  }
}

type Mount = (ctx: Context) => Promise<Fiber>

async function apiPath(name: string, mount: Mount, prefix: string): Promise<Result> {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await mount(ctx)
  const p = ctx.sessionPersistence
  const batches: number[] = []
  timeBatches(p, batches)
  const all = Array.from({ length: SESSIONS }, (_, i) => sessionEvents(1785000000000 + i))
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  let next = 0
  await Promise.all(Array.from({ length: Math.min(API_CONCURRENCY, SESSIONS) }, async () => {
    while (next < SESSIONS) {
      const i = next++
      const id = SessionId(`${prefix}-api-${i}`)
      await p.create({ version: 0, id, createdAt: 1785000000000, cwd: '/bench' } as SessionHeader)
      await p.append(id, all[i]!)
    }
  }))
  const seconds = (performance.now() - t0) / 1000
  const cpuSeconds = cpuSince(c0)
  await fiber.dispose()
  const events = SESSIONS * EVENTS
  return { backend: name, path: 'api', events, seconds, cpuSeconds, eventsPerSec: events / seconds, p99BatchMs: p99(batches), records: batches.length }
}

async function livePath(name: string, mount: Mount, prefix: string): Promise<Result> {
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await mount(ctx)
  const batches: number[] = []
  timeBatches(ctx.sessionPersistence, batches)
  const templates = sessionEvents(0)
  const sessions = Array.from({ length: SESSIONS }, (_, i) => ctx.sessions.create(SessionId(`${prefix}-live-${i}`), { meta: { cwd: '/bench' } }))
  const t0 = performance.now()
  const c0 = process.cpuUsage()
  for (let k = 0; k < EVENTS; k++) {
    const e = templates[k]!
    for (const s of sessions) (s as any).append(e.type, e.data)
    // Let the windows' writes run between rounds, as a live agent's event loop would.
    await new Promise(ok => setImmediate(ok))
  }
  const flushes: number[] = []
  await Promise.all(sessions.map(async s => {
    const t = performance.now()
    await ctx.sessions.flush(s)
    flushes.push(performance.now() - t)
  }))
  const seconds = (performance.now() - t0) / 1000
  const cpuSeconds = cpuSince(c0)
  await fiber.dispose()
  const events = SESSIONS * EVENTS
  return { backend: name, path: 'live', events, seconds, cpuSeconds, eventsPerSec: events / seconds, p99BatchMs: p99(batches), p99FlushMs: p99(flushes), records: batches.length }
}

/** Raw nats.js: one async JetStream publish per event (no guard, no headers), into a scratch stream. */
async function rawNats(url: string): Promise<Result> {
  const nc = await connect({ servers: url, noAsyncTraces: true })
  const jsm = await jetstreamManager(nc)
  const stream = `BENCH_RAW_${process.pid}`
  await jsm.streams.add({ name: stream, subjects: [`benchraw.${process.pid}.>`], storage: 'file' as any })
  const js = jetstream(nc)
  const lines = sessionEvents(1785000000000).map(e => JSON.stringify(e))
  const t0 = performance.now()
  const inflight = new Set<Promise<unknown>>()
  for (let i = 0; i < SESSIONS; i++) {
    const subject = `benchraw.${process.pid}.${i}`
    for (const line of lines) {
      const pr: Promise<unknown> = js.publish(subject, line).finally(() => inflight.delete(pr))
      inflight.add(pr)
      if (inflight.size >= 4096) await Promise.race(inflight)
    }
  }
  await Promise.all(inflight)
  const seconds = (performance.now() - t0) / 1000
  await jsm.streams.delete(stream)
  await nc.close()
  const events = SESSIONS * EVENTS
  return { backend: 'raw nats.js', path: 'per-event async publish', events, seconds, eventsPerSec: events / seconds }
}

// --- the stack ----------------------------------------------------------------------------------

async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => { const port = (srv.address() as { port: number }).port; srv.close(() => ok(port)) })
    srv.on('error', fail)
  })
}

async function startStack(tmp: string): Promise<{ url: string; stop: () => Promise<void> }> {
  if (process.env.AGENTLOG_NATS_URL) return { url: process.env.AGENTLOG_NATS_URL, stop: async () => {} }
  const bin = process.env.AGENTLOG_BIN ?? join(tmp, 'agentlog')
  if (!process.env.AGENTLOG_BIN) execFileSync('go', ['build', '-o', bin, './cmd/agentlog'], { cwd: repoRoot, stdio: 'inherit' })
  const port = await freePort()
  const dev: ChildProcess = spawn(bin, ['dev', '--data', join(tmp, 'data'), '--listen', `127.0.0.1:${port}`, '--projectors', '0'], { stdio: ['ignore', 'pipe', 'ignore'] })
  const url = await new Promise<string>((ok, fail) => {
    let buf = ''
    dev.stdout!.on('data', (d: Buffer) => { buf += d; const m = /listening on (\S+)/.exec(buf); if (m) ok(m[1]!) })
    dev.on('exit', code => fail(new Error(`agentlog dev exited with ${code}`)))
  })
  dev.stdout!.resume()
  return { url, stop: async () => { dev.kill('SIGINT'); await new Promise(ok => dev.once('exit', ok)) } }
}

async function main(): Promise<void> {
  const tmp = mkdtempSync(join(tmpdir(), 'dsh-agentlog-bench-'))
  const { url, stop } = await startStack(tmp)
  const run = `${process.pid}`
  const n = `bench${run}`
  const names = process.env.BENCH_DEFAULT_NAMES === '1' ? undefined : {
    stream: `ALBENCH_${run}`, subjectPrefix: `albench.${run}.session`, sessionsBucket: `albench_${run}_sessions`,
    errorsStream: `ALBENCH_${run}_ERRORS`, errorsPrefix: `albench.${run}.errors`, writersBucket: `albench_${run}_writers`,
  }
  const agentlogMount: Mount = ctx => ctx.plugin(AgentlogSessionPersistence, { servers: url, ...names ? { names, provision: true } : {} })
  const jsonlMount = (sub: string): Mount => ctx => ctx.plugin(JsonlSessionPersistence as any, { root: join(tmp, `jsonl-${sub}`) })
  const noopMount: Mount = ctx => ctx.plugin(NoopPersistence)
  console.error(`bench: ${SESSIONS} sessions × ${EVENTS} events of ${SIZE} bytes, server ${url}`)
  const results: (Result & { round: number })[] = []
  const only = process.env.BENCH_ONLY // e.g. "api:agentlog,live:agentlog" (for profiling)
  const dropNamespace = async () => {
    if (!names) return
    const nc: NatsConnection = await connect({ servers: url })
    const jsm = await jetstreamManager(nc)
    for (const s of [names.stream, `KV_${names.sessionsBucket}`, `KV_${names.writersBucket}`, names.errorsStream]) await jsm.streams.delete(s).catch(() => {})
    await nc.close()
  }
  const rounds = only !== undefined ? 1 : ROUNDS
  try {
    for (let round = 0; round < rounds; round++) {
      const r = `${n}-r${round}`
      for (const path of ['api', 'live'] as const) {
        const legs: [string, string, Mount][] = [
          ['noop (seam)', `${r}-noop`, noopMount], ['agentlog', `${r}-al`, agentlogMount], ['jsonl', `${r}-jsonl`, jsonlMount(`${path}-${round}`)],
        ]
        for (let k = 0; k < legs.length; k++) {
          const [name, prefix, mount] = legs[(k + round) % legs.length]!
          const key = `${path}:${name === 'noop (seam)' ? 'noop' : name}`
          if (only !== undefined && !only.split(',').includes(key)) continue
          const x = await (path === 'api' ? apiPath : livePath)(name, mount, prefix)
          results.push({ ...x, round })
          console.error(JSON.stringify({ round, ...x }))
        }
      }
      await dropNamespace() // every round starts from an empty stream
    }
    if (only === undefined || only.split(',').includes('raw')) {
      const x = await rawNats(url)
      results.push({ ...x, round: 0 })
      console.error(JSON.stringify(x))
    }
  } finally {
    await dropNamespace()
    await stop()
    rmSync(tmp, { recursive: true, force: true })
  }
  if (only !== undefined) return
  const median = (xs: number[]) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2 }
  const get = (b: string, p: string, round: number) => results.find(r => r.backend === b && r.path === p && r.round === round)!
  const summary: Record<string, unknown> = {
    sessions: SESSIONS, events_per_session: EVENTS, event_bytes: SIZE, rounds,
    durability: {
      agentlog: 'a batch resolves when the JetStream server acks its record: stored in the stream (file storage, R1 here); the server fsyncs on its sync_interval (default 2 min), or per write with sync_interval: always, and an R3 stream acks after a quorum holds it',
      jsonl: 'a batch resolves after its lines are appended and fsync(2) returns',
      seam: 'none (nothing is stored)',
    },
  }
  for (const p of ['api', 'live']) {
    const per = Array.from({ length: rounds }, (_, round) => {
      const al = get('agentlog', p, round), seam = get('noop (seam)', p, round), jl = get('jsonl', p, round)
      return { al, seam, jl, toSeam: al.eventsPerSec / seam.eventsPerSec, toJsonl: al.eventsPerSec / jl.eventsPerSec }
    })
    const m = (f: (x: typeof per[number]) => number, digits = 0) => +median(per.map(f)).toFixed(digits)
    summary[p] = {
      agentlog_events_per_s: m(x => x.al.eventsPerSec),
      seam_events_per_s: m(x => x.seam.eventsPerSec),
      jsonl_events_per_s: m(x => x.jl.eventsPerSec),
      ratio_to_seam: m(x => x.toSeam, 3),
      ratio_to_jsonl: m(x => x.toJsonl, 3),
      p99_batch_write_ms: m(x => x.al.p99BatchMs ?? 0, 1),
      ...p === 'live' ? { p99_flush_ms: m(x => x.al.p99FlushMs ?? 0, 1), jsonl_p99_flush_ms: m(x => x.jl.p99FlushMs ?? 0, 1) } : {},
      rounds: per.map(x => ({ ratio_to_seam: +x.toSeam.toFixed(3), ratio_to_jsonl: +x.toJsonl.toFixed(3) })),
    }
  }
  summary.raw_nats_per_event_async_publish_events_per_s = Math.round(results.find(r => r.backend === 'raw nats.js')!.eventsPerSec)
  console.log(JSON.stringify(summary, null, 2))
}

await main()

// A stale TS writer after acknowledged-data loss (the TS twins of integration_test's
// TestStaleWriterAfterDataLoss and TestStaleWriterWriteDuringOutage). Each test runs an `agentlog
// dev` of its own, stops it, and starts it again from a copy of its data taken earlier: a crash that
// lost acknowledged records, so the stream hands their stream seqs out again. (An operator purge
// cannot show this: the stream never reuses a purged seq, so the guard alone fences the writer;
// the last test shows that case.)
// A Go writer (integration_test/writer) then takes the session over (Takeover(): the TS writer's
// restored lease is live) and re-grows its subject to the very stream seq the TS writer guards
// with. The TS writer's next write must fail with AgentlogAckedLostError naming the lost seqs, write
// nothing, and leave the log readable and whole. Then: a restart that lost nothing (the proof
// holds, the writer writes on), a server back with older lease state (the writer renews its lease
// there rather than being fenced for good), and a purge of the session's subject on the shared
// stack (no restart: the guard conflict is told apart as lost acknowledged events).
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { cpSync, mkdtempSync, rmSync } from 'node:fs'
import { createServer, connect as netConnect, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, expect, it } from 'vitest'
import { Context, type Fiber } from '@deepseek-ai/cordis'
import SessionStore, { SessionId } from '@deepseek-ai/dsh-session'
import type { SessionEvent, SessionHeader } from '@deepseek-ai/dsh-session'
import { connect } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import AgentlogSessionPersistence, { AgentlogAckedLostError, DEFAULT_PARTITIONS, errorsSubject, sessionSubject, token } from '../src/index.ts'
import { agentlogBin, isolatedConfig, writerBin } from './stack.ts'

/** A free loopback port. */
function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer()
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port
      srv.close(() => ok(port))
    })
    srv.on('error', fail)
  })
}

/** An `agentlog dev` of this test's own, on a fixed port and data dir, that can be stopped and started again. */
class Dev {
  proc?: ChildProcess
  constructor(readonly dir: string, readonly port: number) {}
  get url(): string { return `nats://127.0.0.1:${this.port}` }
  async start(): Promise<void> {
    const p = spawn(agentlogBin(), ['dev', '--data', this.dir, '--listen', `127.0.0.1:${this.port}`, '--projectors', '0', '--forkers', '0'],
      { stdio: ['ignore', 'pipe', 'pipe'] })
    this.proc = p
    let err = ''
    p.stderr!.on('data', (d: Buffer) => { err += d.toString() })
    await new Promise<void>((ok, fail) => {
      let buf = ''
      p.stdout!.on('data', (d: Buffer) => {
        buf += d.toString()
        if (/listening on /.test(buf)) ok()
      })
      p.once('exit', code => fail(new Error(`agentlog dev exited with ${code}: ${err}`)))
    })
  }
  async stop(): Promise<void> {
    const p = this.proc
    if (p === undefined || p.exitCode !== null) return
    this.proc = undefined
    const exited = new Promise(ok => p.once('exit', ok))
    p.kill('SIGINT')
    await exited
  }
}

/** A TCP proxy to port whose connections the test cuts, and holds off while shut. */
class Proxy {
  private readonly socks = new Set<Socket>()
  private open = true
  private server?: Server
  port = 0
  constructor(private readonly target: number) {}
  async start(): Promise<void> {
    this.server = createServer(c => {
      if (!this.open) { c.destroy(); return }
      const up = netConnect(this.target, '127.0.0.1')
      for (const s of [c, up]) { this.socks.add(s); s.on('close', () => this.socks.delete(s)); s.on('error', () => {}) }
      c.pipe(up); up.pipe(c)
      c.on('close', () => up.destroy()); up.on('close', () => c.destroy())
    })
    await new Promise<void>(ok => this.server!.listen(0, '127.0.0.1', ok))
    this.port = (this.server.address() as { port: number }).port
  }
  /** Cut every connection and refuse new ones. */
  shut(): void {
    this.open = false
    for (const s of this.socks) s.destroy()
  }
  release(): void { this.open = true }
  async close(): Promise<void> {
    this.shut()
    await new Promise(ok => this.server?.close(ok))
  }
}

/** Poll cond every 20 ms until it holds (up to ms). */
async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`waited ${ms} ms for: ${what}`)
    await new Promise(ok => setTimeout(ok, 20))
  }
}

/** One run of the Go fault-test writer: resumes the session (taking it over), writing its closers and end-seed. */
function goTakeover(url: string, id: string): Promise<{ ok: boolean; out: string }> {
  return new Promise(resolve => {
    execFile(writerBin(), ['--nats', url, '--session', id, '--events', '1', '--writer-id', 'go-B', '--takeover'],
      (err, stdout, stderr) => resolve({ ok: err === null, out: stdout + stderr }))
  })
}

/** The session's last record, from the stream leader: stream seq and Nats-Msg-Id. */
async function leaderTail(url: string, id: string): Promise<{ seq: number; msgId: string }> {
  const nc = await connect({ servers: url })
  try {
    const m = await (await jetstreamManager(nc)).streams.getMessage('AGENTLOG', { last_by_subj: sessionSubject(id, DEFAULT_PARTITIONS) })
    return { seq: m!.seq, msgId: m!.header.get('Nats-Msg-Id') }
  } finally {
    await nc.close()
  }
}

/** `agentlog events --no-header -- id` against url: the stored log, as the Go reader reads it. */
function goEvents(url: string, id: string): Promise<SessionEvent[]> {
  return new Promise((ok, fail) => {
    execFile(agentlogBin(), ['--nats', url, 'events', '--no-header', '--', id], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err !== null) fail(new Error(`agentlog events ${id}: ${stderr || err.message}`))
      else ok(stdout.split('\n').filter(l => l !== '').map(l => JSON.parse(l) as SessionEvent))
    })
  })
}

const ev = (seq: number): SessionEvent => (seq === 0
  ? { type: 'turn/start', seq, time: 1, data: { turn: 1 } }
  : { type: 'stale/test', seq, time: 1 + seq, data: { n: seq }, ignorable: true }) as SessionEvent

const cleanups: (() => Promise<void>)[] = []
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
})

/**
 * The common part: a dev server of its own; TS writer A (through a proxy, when asked) acknowledges
 * seqs 0..2 and 3..5 in two records, with a copy of the server's data taken between them.
 */
async function setup(viaProxy: boolean) {
  const dir = mkdtempSync(join(tmpdir(), 'agentlog-stale-'))
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }))
  const dev = new Dev(join(dir, 'data'), await freePort())
  cleanups.push(() => dev.stop())
  await dev.start()
  let url = dev.url
  let proxy: Proxy | undefined
  if (viaProxy) {
    proxy = new Proxy(dev.port)
    await proxy.start()
    cleanups.push(() => proxy!.close())
    url = `nats://127.0.0.1:${proxy.port}`
  }
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  // A long lease TTL: A's renewal must not notice B's takeover first (these tests are about the tail).
  const fiber: Fiber = await ctx.plugin(AgentlogSessionPersistence, {
    servers: url, writerId: 'ts-A', leaseTtlMs: 120_000, requestTimeoutMs: 20_000,
  })
  cleanups.push(() => fiber.dispose())
  const a = ctx.sessionPersistence as AgentlogSessionPersistence
  const nc = await a.connection()
  const id = `stale-${Math.random().toString(36).slice(2, 8)}`
  const meta = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  await a.appendBatch(meta, [ev(0), ev(1), ev(2)], false)
  await dev.stop()
  const snapshot = join(dir, 'snapshot')
  cpSync(dev.dir, snapshot, { recursive: true })
  await dev.start()
  await until('A reconnected', () => nc.rtt().then(() => true, () => false))
  await a.appendBatch(meta, [ev(3), ev(4), ev(5)], true)
  const lost = await leaderTail(dev.url, id)
  /** The loss: the server starts again from the copy. */
  const lose = async () => {
    await dev.stop()
    rmSync(dev.dir, { recursive: true, force: true })
    cpSync(snapshot, dev.dir, { recursive: true })
    await dev.start()
  }
  return { dev, proxy, a, nc, id, meta, lost, lose }
}

/** After A's refused write: B's record is the tail still, and the log reads back whole and contiguous, A's acknowledged 0..2 first. */
async function checkLog(url: string, id: string, bTail: { seq: number }): Promise<void> {
  expect((await leaderTail(url, id)).seq, 'A wrote after the loss').toBe(bTail.seq)
  const events = await goEvents(url, id)
  events.forEach((e, i) => expect(e.seq).toBe(i))
  expect(events.slice(0, 3)).toEqual([ev(0), ev(1), ev(2)])
  expect(events.at(-1)!.type).toBe('session/end-seed')
  // And the TS read path loads it (it checks that each record continues the previous one).
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const f = await ctx.plugin(AgentlogSessionPersistence, { servers: url, leaseTtlMs: 0 })
  try {
    const st = await (ctx.sessionPersistence as AgentlogSessionPersistence).loadStored(SessionId(id))
    expect(st!.events).toEqual(events)
  } finally {
    await f.dispose()
  }
}

it('a stale TS writer after a server lost its acknowledged tail and a Go writer took the session over: AgentlogAckedLostError, nothing written', async () => {
  const { dev, a, nc, id, meta, lost, lose } = await setup(false)
  await lose()
  const b = await goTakeover(dev.url, id) // A's restored lease is live: a takeover
  expect(b.ok, b.out).toBe(true)
  const bTail = await leaderTail(dev.url, id)
  expect(bTail.seq, 'B re-grew the subject to the stream seq of A\'s lost record (the case the guard alone misses)').toBe(lost.seq)
  expect(bTail.msgId).not.toBe(lost.msgId)
  await until('A reconnected', () => nc.rtt().then(() => true, () => false))

  const err = await a.appendBatch(meta, [ev(6)], true).then(() => null, (e: unknown) => e)
  expect(err, 'A\'s write after the loss succeeded').toBeInstanceOf(AgentlogAckedLostError)
  const e = err as AgentlogAckedLostError
  expect([e.session, e.fromSeq, e.toSeq, e.firstSeq, e.lastSeq]).toEqual([id, 3, 5, 6, 6])
  expect(e.message).toContain(`stream seq ${lost.seq}`)
  // A retry (dsh appends the same events again) is refused the same way.
  expect(await a.appendBatch(meta, [ev(6)], true).then(() => null, (x: unknown) => x)).toBeInstanceOf(AgentlogAckedLostError)
  await checkLog(dev.url, id, bTail)
  // The failure is reported on agentlog.errors.<token>, with the lost range (PROTOCOL.md §7).
  const rc = await connect({ servers: dev.url })
  try {
    await until('the report is stored', async () => (await (await jetstreamManager(rc)).streams.getMessage('AGENTLOG_ERRORS', { last_by_subj: errorsSubject(id) }).catch(() => null)) !== null)
    const rep = await (await jetstreamManager(rc)).streams.getMessage('AGENTLOG_ERRORS', { last_by_subj: errorsSubject(id) })
    expect(rep!.json()).toMatchObject({ type: 'agent/error', session: id, writerId: 'ts-A', firstSeq: 6, lastSeq: 6, fenced: true, lost: [3, 5] })
  } finally {
    await rc.close()
  }
}, 180_000)

it('a stale TS writer whose write is made while disconnected, across the loss and a Go takeover: AgentlogAckedLostError, on its retry too, nothing written', async () => {
  const { dev, proxy, a, id, meta, lost, lose } = await setup(true)
  // A is cut off (and kept off) before the loss; its next write is made while it is disconnected.
  const statuses: string[] = []
  const nc = await a.connection()
  void (async () => { for await (const s of nc.status()) statuses.push(s.type) })()
  proxy!.shut()
  await until('A disconnected', () => statuses.includes('disconnect'))
  const write = a.appendBatch(meta, [ev(6)], true).then(() => null, (e: unknown) => e)
  await lose()
  const b = await goTakeover(dev.url, id)
  expect(b.ok, b.out).toBe(true)
  const bTail = await leaderTail(dev.url, id)
  expect(bTail.seq, 'B re-grew the subject to the stream seq of A\'s lost record').toBe(lost.seq)
  proxy!.release() // A reconnects now: a record sent with its old guard would be accepted

  const err = await write
  // A retry (dsh appends the same events again) is refused the same way; neither writes.
  const retry = await a.appendBatch(meta, [ev(6)], true).then(() => null, (x: unknown) => x)
  await checkLog(dev.url, id, bTail)
  expect(err, 'A\'s write made during the outage succeeded').toBeInstanceOf(AgentlogAckedLostError)
  const e = err as AgentlogAckedLostError
  expect([e.session, e.fromSeq, e.toSeq]).toEqual([id, 3, 5])
  expect(retry).toBeInstanceOf(AgentlogAckedLostError)
}, 180_000)

/** A dev server of its own and a TS writer on it (leaseTtlMs as given). */
async function writerOn(leaseTtlMs: number) {
  const dir = mkdtempSync(join(tmpdir(), 'agentlog-stale-'))
  cleanups.push(async () => rmSync(dir, { recursive: true, force: true }))
  const dev = new Dev(join(dir, 'data'), await freePort())
  cleanups.push(() => dev.stop())
  await dev.start()
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber: Fiber = await ctx.plugin(AgentlogSessionPersistence, { servers: dev.url, writerId: 'ts-A', leaseTtlMs, requestTimeoutMs: 20_000 })
  cleanups.push(() => fiber.dispose())
  const a = ctx.sessionPersistence as AgentlogSessionPersistence
  const id = `stale-${Math.random().toString(36).slice(2, 8)}`
  const meta = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  return { dir, dev, a, nc: await a.connection(), id, meta }
}

it('a TS writer across a server restart that lost nothing writes on: its proof holds', async () => {
  const { dev, a, nc, id, meta } = await writerOn(120_000)
  await a.appendBatch(meta, [ev(0), ev(1), ev(2)], false)
  await dev.stop()
  await dev.start()
  await until('A reconnected', () => nc.rtt().then(() => true, () => false))
  await a.appendBatch(meta, [ev(3), ev(4), ev(5)], true)
  expect(await goEvents(dev.url, id)).toEqual([0, 1, 2, 3, 4, 5].map(ev))
}, 120_000)

it('a TS writer whose server came back with older lease state (no record lost) renews its lease there and writes on', async () => {
  const { dir, dev, a, nc, id, meta } = await writerOn(2000) // renewed every 500 ms
  await a.appendBatch(meta, [ev(0), ev(1), ev(2)], false)
  const lease = async (): Promise<{ rev: number; writer: unknown } | null> => {
    const c = await connect({ servers: dev.url })
    try {
      const m = await (await jetstreamManager(c)).streams.getMessage('KV_agentlog_writers', { last_by_subj: `$KV.agentlog_writers.${token(id)}` }).catch(() => null)
      return m === null || m.data.length === 0 ? null : { rev: m.seq, writer: (m.json() as { writer?: unknown }).writer }
    } finally {
      await c.close()
    }
  }
  await dev.stop()
  const snapshot = join(dir, 'snapshot')
  cpSync(dev.dir, snapshot, { recursive: true })
  await dev.start()
  await until('A reconnected', () => nc.rtt().then(() => true, () => false))
  await until('A holds its lease', async () => (await lease())?.writer === 'ts-A')
  const before = (await lease())!.rev
  await until('A renewed its lease past the copy', async () => ((await lease())?.rev ?? 0) > before + 2)
  // The server comes back with the copy: A's lease is older there (or expired with its TTL).
  await dev.stop()
  rmSync(dev.dir, { recursive: true, force: true })
  cpSync(snapshot, dev.dir, { recursive: true })
  await dev.start()
  await until('A reconnected', () => nc.rtt().then(() => true, () => false))
  const restored = (await lease())?.rev ?? 0
  await until('A renewed its lease on the older state (twice)', async () => {
    const l = await lease()
    return l !== null && l.writer === 'ts-A' && l.rev > restored + 1
  })
  await a.appendBatch(meta, [ev(3), ev(4), ev(5)], true)
  expect(await goEvents(dev.url, id)).toEqual([0, 1, 2, 3, 4, 5].map(ev))
}, 120_000)

it('acknowledged records removed under a TS writer (an operator purges the session\'s subject): AgentlogAckedLostError naming them, nothing written', async () => {
  const { config, names, cleanup } = isolatedConfig({ writerId: 'ts-A', leaseTtlMs: 0 })
  cleanups.push(cleanup)
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber: Fiber = await ctx.plugin(AgentlogSessionPersistence, config)
  cleanups.push(() => fiber.dispose())
  const a = ctx.sessionPersistence as AgentlogSessionPersistence
  const id = `stale-${Math.random().toString(36).slice(2, 8)}`
  const meta = { version: 0, id: SessionId(id), createdAt: 1785000000000 } as SessionHeader
  await a.appendBatch(meta, [ev(0), ev(1), ev(2)], false)
  await a.appendBatch(meta, [ev(3), ev(4), ev(5)], true)
  const jsm = await jetstreamManager(await a.connection())
  const subject = sessionSubject(id, 4, names.subjectPrefix)
  // The stream denies message deletes: the operator's tool is a purge of the subject.
  expect((await jsm.streams.purge(names.stream, { filter: subject })).purged).toBe(2)

  const err = await a.appendBatch(meta, [ev(6)], true).then(() => null, (e: unknown) => e)
  expect(err).toBeInstanceOf(AgentlogAckedLostError)
  const e = err as AgentlogAckedLostError
  expect([e.session, e.fromSeq, e.toSeq]).toEqual([id, 0, 5])
  expect(await jsm.streams.getMessage(names.stream, { last_by_subj: subject }).catch(() => null), 'A wrote after the loss').toBeNull()
}, 60_000)

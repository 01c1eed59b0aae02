/**
 * Prometheus metrics of the write path (opt-in, `config.metrics`), under the names and labels of the
 * Go publisher's (publisher/metrics.go: `agentlog_publisher_*`), so that the dashboard's publisher row
 * (deploy/grafana-agentlog.json) shows dsh agents as it shows Go ones. Built on prom-client.
 */
import { createServer, type Server } from 'node:http'
import { Counter, Gauge, Histogram, Registry, register as defaultRegistry } from 'prom-client'
import { AgentlogAckedLostError, AgentlogConflictError, AgentlogLeaseHeldError } from './errors.js'

/** The metrics config: off unless set. */
export interface MetricsConfig {
  /**
   * Serve the metrics (Prometheus text format) on `http://HOST:PORT/metrics`, e.g. `127.0.0.1:9464`
   * (port 0: a free one; {@link AgentlogMetrics.address} says which).
   */
  listen?: string
  /**
   * Register on prom-client's default registry (for an agent process that already exposes it),
   * instead of a registry of this plugin instance's own. One instance per process may do so.
   */
  defaultRegistry?: boolean
}

/** Failure kinds of agentlog_publisher_write_failures_total, as the Go publisher's. */
export const FAILURE_KINDS = ['conflict', 'acked_lost', 'deleted', 'fenced', 'timeout', 'no_responders', 'other'] as const

/** The write-duration histogram's buckets, seconds (the Go publisher's). */
const WRITE_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]

/** What a metrics instance reads from the backend when it is scraped. */
export interface PendingSource {
  /** Events and bytes handed to appendBatch and not yet durable. */
  pending(): { events: number; bytes: number }
  /** Sessions this instance writes (holds a writer lease on, or has written). */
  writers(): number
}

/** A plugin instance's metrics. */
export class AgentlogMetrics {
  readonly registry: Registry
  private readonly events: Counter
  private readonly records: Counter
  private readonly bytes: Counter
  private readonly writeSeconds: Histogram
  private readonly failures: Counter<'kind'>
  private readonly fenced: Counter
  private server?: Server
  private listening?: Promise<string>

  constructor(config: MetricsConfig, source: PendingSource) {
    this.registry = config.defaultRegistry ? defaultRegistry : new Registry()
    const registers = [this.registry]
    this.events = new Counter({ name: 'agentlog_publisher_appended_events_total', help: 'Events written durably.', registers })
    this.records = new Counter({ name: 'agentlog_publisher_appended_records_total', help: 'Records (one per written batch) written durably.', registers })
    this.bytes = new Counter({
      name: 'agentlog_publisher_appended_bytes_total', registers,
      help: "Bytes of the events' JSON fields (type, time, data, surfaceOp, sourceEventSeqs) written durably.",
    })
    this.writeSeconds = new Histogram({
      name: 'agentlog_publisher_write_duration_seconds', registers, buckets: WRITE_BUCKETS,
      help: "Time to write one record durably, retries included (from its batch's write start to its ack).",
    })
    this.failures = new Counter({
      name: 'agentlog_publisher_write_failures_total', labelNames: ['kind'], registers,
      help: 'Record writes that failed, by kind (conflict, acked_lost, deleted and fenced also fence the writer).',
    })
    for (const k of FAILURE_KINDS) this.failures.inc({ kind: k }, 0)
    this.fenced = new Counter({
      name: 'agentlog_publisher_fenced_writers_total', registers,
      help: 'Writers fenced: a guard conflict, a takeover of their lease, lost acknowledged events, or their session deleted.',
    })
    new Gauge({
      name: 'agentlog_publisher_pending_events', registers,
      help: 'Events admitted and not yet durable (pending and in flight), over the open writers.',
      collect() { this.set(source.pending().events) },
    })
    new Gauge({
      name: 'agentlog_publisher_pending_bytes', registers,
      help: 'Bytes (as counted by Options.MaxPendingBytes) of the events not yet durable, over the open writers.',
      collect() { this.set(source.pending().bytes) },
    })
    new Gauge({ name: 'agentlog_publisher_writers', help: 'Open writers.', registers, collect() { this.set(source.writers()) } })
    // dsh's coordinator hands over validated lossless-JSON events: the backend repairs no text.
    new Counter({
      name: 'agentlog_publisher_sanitized_strings_total', registers,
      help: 'Strings of event data repaired by Append (ill-formed UTF-8, lone surrogate escapes); always 0 here: dsh validates the events it hands over.',
    })
    if (config.listen !== undefined) this.listening = this.serve(config.listen)
  }

  /** A batch written durably: its events, records, field bytes, and the time since it started. */
  wrote(events: number, records: number, fieldBytes: number, startedMs: number): void {
    this.events.inc(events)
    this.records.inc(records)
    this.bytes.inc(fieldBytes)
    this.writeSeconds.observe((Date.now() - startedMs) / 1000)
  }

  /** A batch whose write failed with err. */
  failed(err: unknown): void {
    const kind = failureKind(err)
    this.failures.inc({ kind })
    if (kind === 'conflict' || kind === 'fenced' || kind === 'acked_lost') this.fenced.inc()
  }

  /** The address served (`host:port`), once listening; undefined without `listen`. */
  address(): Promise<string> | undefined {
    return this.listening
  }

  private serve(listen: string): Promise<string> {
    const i = listen.lastIndexOf(':')
    const host = listen.slice(0, i).replace(/^\[|\]$/g, '')
    const port = Number(listen.slice(i + 1))
    if (i <= 0 || !Number.isInteger(port) || port < 0 || port > 65535) {
      return Promise.reject(new Error(`agentlog session persistence: metrics.listen ${JSON.stringify(listen)}: want HOST:PORT`))
    }
    const server = createServer((req, res) => {
      if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: the metrics are at /metrics\n')
        return
      }
      this.registry.metrics().then(
        body => res.writeHead(200, { 'content-type': this.registry.contentType }).end(body),
        err => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err)))
    })
    this.server = server
    return new Promise((resolve, reject) => {
      server.once('error', err => reject(new Error(`agentlog session persistence: metrics.listen ${listen}: ${err.message}`, { cause: err })))
      server.listen(port, host, () => {
        const a = server.address()
        resolve(typeof a === 'object' && a !== null ? `${a.family === 'IPv6' ? `[${a.address}]` : a.address}:${a.port}` : listen)
      })
    })
  }

  /** Stop serving, and take the metrics off the default registry when they are on it. */
  async close(): Promise<void> {
    if (this.registry === defaultRegistry) {
      for (const n of ['appended_events_total', 'appended_records_total', 'appended_bytes_total', 'write_duration_seconds', 'write_failures_total',
        'fenced_writers_total', 'pending_events', 'pending_bytes', 'writers', 'sanitized_strings_total']) {
        defaultRegistry.removeSingleMetric(`agentlog_publisher_${n}`)
      }
    }
    const s = this.server
    if (s === undefined) return
    this.server = undefined
    await new Promise<void>(resolve => s.close(() => resolve()))
  }
}

/** The failure kind of a write error, as the Go publisher classifies it. */
export function failureKind(err: unknown): (typeof FAILURE_KINDS)[number] {
  if (err instanceof AgentlogAckedLostError) return 'acked_lost'
  if (err instanceof AgentlogConflictError) return 'conflict'
  if (err instanceof AgentlogLeaseHeldError) return 'fenced'
  const text = err instanceof Error ? `${err.message} ${(err.cause as Error | undefined)?.message ?? ''}` : String(err)
  const code = (err as { code?: string } | undefined)?.code ?? (err instanceof Error ? (err.cause as { code?: string } | undefined)?.code : undefined)
  if (/no responders/i.test(text) || code === '503') return 'no_responders'
  if (/timeout|timed out/i.test(text) || code === 'TIMEOUT') return 'timeout'
  return 'other'
}

/**
 * The bytes of an event's JSON fields (type, time, data, surfaceOp, sourceEventSeqs), as the Go
 * publisher counts them, from its encoded line: the line less the envelope the encoder adds around
 * them (braces, key names, the quotes of type, seq and ignorable).
 */
export function fieldBytes(lineBytes: number, ev: { seq: number; surfaceOp?: unknown; sourceEventSeqs?: unknown; ignorable?: boolean }): number {
  let envelope = '{"type":"","seq":,"time":,"data":}'.length + String(ev.seq).length
  if (ev.surfaceOp !== undefined) envelope += ',"surfaceOp":'.length
  if (ev.sourceEventSeqs !== undefined) envelope += ',"sourceEventSeqs":'.length
  if (ev.ignorable === true) envelope += ',"ignorable":true'.length
  return Math.max(0, lineBytes - envelope)
}

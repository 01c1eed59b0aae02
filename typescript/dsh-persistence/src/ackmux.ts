/**
 * The publish multiplexer: JetStream acked publishes (records, metadata creates, lease renewals)
 * over one wildcard inbox subscription, with header blocks built as one string.
 */
import {
  createInbox, headers as natsHeaders, NoRespondersError, TimeoutError,
  type Msg, type MsgHdrs, type NatsConnection, type Subscription,
} from '@nats-io/transport-node'
import { JetStreamApiError, JetStreamError, type ApiError, type PubAck } from '@nats-io/jetstream'

/** Header pairs in the order they are sent. */
export type HeaderPairs = readonly (readonly [string, string])[]

/** A nats.js header object holding pairs. */
export function headersOf(pairs: HeaderPairs): MsgHdrs {
  const h = natsHeaders()
  for (const [k, v] of pairs) h.set(k, v)
  return h
}

/**
 * A NATS header block built as one string (the bytes MsgHdrsImpl.encode() would send for the same
 * keys and values in this order): HPUB sends `encode()`'s bytes as they are.
 */
class RawHeaders {
  constructor(private readonly text: string) {}
  encode(): Uint8Array { return Buffer.from(this.text, 'latin1') }
}

/** "NATS/1.0\r\nk: v\r\n...\r\n" for ASCII keys and values (ours: tokens, decimals, Msg-Ids). */
function rawHeaderText(pairs: HeaderPairs): string {
  let t = 'NATS/1.0'
  for (const [k, v] of pairs) t += '\r\n' + k + ': ' + v
  return t + '\r\n\r\n'
}

const ASCII_HEADER = /^[\x21-\x7e]+$/

/** A JetStream publish reply: an ack, or an API error. */
type AckReply = Partial<PubAck> & { error?: ApiError }

/**
 * JetStream acked publishes over one wildcard inbox subscription: each publish is an HPUB with
 * reply `<inbox>.<n>`; one sweep timer fails those not acked within the timeout. The ack is
 * parsed as js.publish parses it (JetStreamApiError for an API error, no responders as
 * JetStreamError), with no per-request timer, token, stack-capturing error or header object.
 * Publishes are handed to nats.js together once per turn of the event loop (setImmediate), so the
 * records of every session whose window closed in that turn leave in one socket write.
 */
export class AckMux {
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
  publish(subject: string, data: Uint8Array | string, pairs: HeaderPairs): Promise<PubAck> {
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
    let v: AckReply
    try { v = JSON.parse(m.string()) as AckReply } catch (e) { p.fail(e as Error); return }
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

  /** Fail every pending publish with err and stop the sweep. */
  stop(err: Error): void {
    clearInterval(this.timer)
    this.queue = []
    for (const [k, p] of this.pending) { this.pending.delete(k); p.fail(err) }
  }
}

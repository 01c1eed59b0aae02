/**
 * The encoder: a batch's event lines encoded once into one UTF-8 buffer, cut from pooled slabs,
 * from which every record body of the batch is a view.
 */
import { encodeLines, type WireEvent } from './wire.js'

/**
 * A batch's event lines, encoded once into one UTF-8 buffer: line i is buf[start(i), ends[i]), and
 * the lines are joined by "\n", so any run of lines is a record body as it stands (a view, no copy).
 */
export class EncodedLines {
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

  /** Lines already encoded (UTF-8, no newline), as they stand: an archive's events restored byte for byte. */
  static ofLines(lines: readonly Buffer[]): EncodedLines {
    const ends = new Array<number>(lines.length)
    const parts: Buffer[] = []
    let off = -1
    for (let i = 0; i < lines.length; i++) {
      if (i > 0) parts.push(NEWLINE)
      parts.push(lines[i]!)
      ends[i] = off += lines[i]!.length + 1
    }
    return new EncodedLines(Buffer.concat(parts), ends)
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

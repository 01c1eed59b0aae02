// A small dsh JSONL reader for the tests: the header line, events, and packed chunk rows
// (conformance/VOCABULARY.md, "Packed chunk rows") expanded to assistant/chunk events.
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { WireEvent, WireHeader } from '../src/wire.ts'

export const sessionsDir = resolve(import.meta.dirname, '../../../../shared/data/dsh-sessions')

export interface Recorded {
  name: string
  file: string
  header?: Partial<WireHeader>
  events: WireEvent[]
  expected: { ok: boolean; messages: unknown[]; events: number }
}

export function readJsonl(text: string): { header?: Partial<WireHeader>; events: WireEvent[] } {
  let header: Partial<WireHeader> | undefined
  const events: WireEvent[] = []
  let first = true
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue
    const v = JSON.parse(line)
    if (first && v.type === 'session') { header = v; first = false; continue }
    first = false
    if (v.type === 'text-chunks' || v.type === 'reasoning-chunks' || v.type === 'tool-call-chunks') {
      const d = v.data
      let time = v.time0
      const n = v.type === 'tool-call-chunks' ? d.args.length : d.texts.length
      for (let k = 0; k < n; k++) {
        if (k > 0) time += d.dt[k - 1]
        let chunk: Record<string, unknown>
        if (v.type === 'tool-call-chunks') {
          chunk = { type: 'tool-call-delta', index: d.index, id: d.id, ...d.name !== undefined ? { name: d.name } : {}, argumentsDelta: d.args[k] }
        } else {
          chunk = { type: v.type === 'text-chunks' ? 'text-delta' : 'reasoning-delta', index: d.index, text: d.texts[k] }
        }
        events.push({ type: 'assistant/chunk', seq: v.seq0 + k, time, data: { turn: d.turn, step: d.step, chunk } })
      }
      continue
    }
    const e: WireEvent = { type: v.type, seq: v.seq, time: v.time, data: v.data }
    if (v.surfaceOp !== undefined) e.surfaceOp = v.surfaceOp
    if (v.sourceEventSeqs !== undefined) e.sourceEventSeqs = v.sourceEventSeqs
    if (v.ignorable === true) e.ignorable = true
    events.push(e)
  }
  return { header, events }
}

import { readdirSync } from 'node:fs'

/** The recorded sessions that the reference accepts (expected.ok). */
export function recordedSessions(all = false): Recorded[] {
  const out: Recorded[] = []
  for (const f of readdirSync(sessionsDir).filter(f => f.endsWith('.jsonl')).sort()) {
    const name = f.slice(0, -'.jsonl'.length)
    const expected = JSON.parse(readFileSync(join(sessionsDir, `${name}.expected.json`), 'utf8'))
    if (!expected.ok && !all) continue
    const { header, events } = readJsonl(readFileSync(join(sessionsDir, f), 'utf8'))
    out.push({ name, file: join(sessionsDir, f), header, events, expected })
  }
  return out
}

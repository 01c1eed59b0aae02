// The wire codec alone (no server): the Go side's token and partition vectors
// (jetstream/token_test.go), record encoding and the decoder's refusals.
import { describe, expect, it } from 'vitest'
import {
  decodeRecord, encodeEventLine, headerLine, headerWireSize, idFromToken, parseHeaderLine, partition, recordHeaders, sessionSubject, token,
} from '../src/wire.ts'

describe('tokens and partitions (the Go vectors)', () => {
  it('maps ids to tokens and back', () => {
    const cases: [string, string][] = [
      ['parent', 'parent'], ['Session-42', 'Session-42'], ['a.b', 'a_2Eb'], ['x_y', 'x_5Fy'], ['*', '_2A'], ['>', '_3E'],
      ['a b', 'a_20b'], ['tab\there', 'tab_09here'], ['é', '_C3_A9'], ['_2E', '_5F2E'], ['agentlog.session.>', 'agentlog_2Esession_2E_3E'],
    ]
    for (const [id, tok] of cases) {
      expect(token(id), id).toBe(tok)
      expect(idFromToken(tok)).toBe(id)
    }
    expect(token('x'.repeat(256))).toHaveLength(256)
    expect(() => token('x'.repeat(257))).toThrow(/id-too-long/)
    expect(() => token('')).toThrow(/id-empty/)
    expect(() => token('\ud800')).toThrow(/id-utf8/)
  })

  it('refuses tokens that the encoding cannot produce', () => {
    for (const tok of ['', 'a.b', 'a*', 'a>', 'a b', '_41', '_2e', '_2', 'abc_', '_G0', '_C3', '_FF_FE', 'x\u00e9', 'a'.repeat(257)]) {
      expect(() => idFromToken(tok), JSON.stringify(tok)).toThrow()
    }
  })

  it('partitions as FNV-1a 32 mod n', () => {
    const cases: [string, number, number][] = [['a', 16, 12], ['a', 7, 5], ['abc', 16, 11], ['abc', 7, 5], ['a_2Eb', 16, 10], ['abc', 1, 0]]
    for (const [tok, n, want] of cases) expect(partition(tok, n), `${tok} mod ${n}`).toBe(want)
    expect(sessionSubject('a.b', 16)).toBe('agentlog.session.10.a_2Eb')
  })
})

describe('records', () => {
  it('encodes events in the Go key order, only true ignorable, no whitespace', () => {
    const line = encodeEventLine('s', { surfaceOp: 'append', sourceEventSeqs: [0], data: { a: '<&>' }, time: 5, seq: 1, type: 't', ignorable: false } as any)
    expect(line).toBe('{"type":"t","seq":1,"time":5,"data":{"a":"<&>"},"sourceEventSeqs":[0],"surfaceOp":"append"}')
    expect(encodeEventLine('s', { type: 'x', seq: 0, time: 1, data: {}, ignorable: true })).toBe('{"type":"x","seq":0,"time":1,"data":{},"ignorable":true}')
    expect(() => encodeEventLine('s', { type: 'x', seq: 0, time: NaN, data: {} })).toThrow(/session "s" seq 0/)
    expect(() => encodeEventLine('s', { type: 'x', seq: 3, time: 1, data: undefined })).toThrow(/losslessly JSON-serializable/)
  })

  it('decodes what it encodes and refuses broken records, naming the rule', () => {
    const h = new Map<string, string[]>(recordHeaders('s', 4, 2).map(([k, v]) => [k, [v]]))
    const values = (m: Map<string, string[]>) => (k: string) => m.get(k) ?? []
    const body = '{"type":"a","seq":4,"time":1,"data":{}}\n{"type":"b","seq":5,"time":2,"data":[]}'
    expect(decodeRecord(values(h), body, 7).events.map(e => e.seq)).toEqual([4, 5])
    const bad = (k: string, v: string[] | undefined, b = body) => {
      const m = new Map(h)
      if (v === undefined) m.delete(k); else m.set(k, v)
      return () => decodeRecord(values(m), b, 7)
    }
    expect(bad('Agentlog-Format', ['2'])).toThrow(/record-format/)
    expect(bad('Agentlog-Session', ['a.b'])).toThrow(/record-session/)
    expect(bad('Agentlog-First-Seq', ['04'])).toThrow(/record-header/)
    expect(bad('Agentlog-Count', ['3'])).toThrow(/record-count/)
    expect(bad('Agentlog-Count', undefined)).toThrow(/record-header/)
    expect(bad('Agentlog-First-Seq', ['5'])).toThrow(/record-seq/)
    expect(bad('Agentlog-Count', ['2'], '{"type":"a","seq":4,"time":1}\n{}')).toThrow(/record-event/)
  })

  it('decodes a format 2 record: offloaded events are named by Agentlog-Blob and their lines are empty', () => {
    const sha = 'ab'.repeat(32)
    const h = new Map<string, string[]>(recordHeaders('s', 4, 3).map(([k, v]) => [k, [v]]))
    h.set('Agentlog-Format', ['2'])
    h.set('Agentlog-Blob', [`5 1000 ${sha} NUID5`])
    const values = (m: Map<string, string[]>) => (k: string) => m.get(k) ?? []
    const body = '{"type":"a","seq":4,"time":1,"data":{}}\n\n{"type":"b","seq":6,"time":2,"data":[]}'
    const dec = decodeRecord(values(h), body, 7)
    expect(dec.blobs).toEqual([{ index: 1, ref: { seq: 5, size: 1000, sha256: sha, id: 'NUID5' } }])
    expect(dec.events.map(e => e.seq)).toEqual([4, 5, 6])
    const bad = (k: string, v: string[] | undefined, b = body) => {
      const m = new Map(h)
      if (v === undefined) m.delete(k); else m.set(k, v)
      return () => decodeRecord(values(m), b, 7)
    }
    expect(bad('Agentlog-Format', ['1'])).toThrow(/record-format/)
    expect(bad('Agentlog-Blob', undefined)).toThrow(/record-format/)
    expect(bad('Agentlog-Blob', [`5 1000 ${sha}`])).toThrow(/record-header/)
    expect(bad('Agentlog-Blob', [`9 1000 ${sha} N`])).toThrow(/record-header/)
    // A named line that is not empty: refused (never read as the event in place of its blob).
    const full = '{"type":"a","seq":4,"time":1,"data":{}}\n{"type":"x","seq":5,"time":1,"data":{}}\n{"type":"b","seq":6,"time":2,"data":[]}'
    expect(bad('Agentlog-Count', ['3'], full)).toThrow(/record-blob/)
    // An empty line nobody names: not an event.
    expect(bad('Agentlog-Blob', [`4 1000 ${sha} N`])).toThrow(/record-event/)
  })

  it('counts header bytes as NATS sends them', () => {
    expect(headerWireSize([['A', 'b']])).toBe('NATS/1.0\r\nA: b\r\n\r\n'.length)
  })
})

describe('metadata', () => {
  it('writes the reference JSONL header line and reads Go-written ones', () => {
    expect(headerLine({ version: 0, id: 'x', createdAt: 5, cwd: '/w', parentSession: 'p', seedLength: 3 }))
      .toBe('{"type":"session","version":0,"id":"x","createdAt":5,"cwd":"/w","parentSession":"p","seedLength":3,"delegationDepth":0}')
    expect(parseHeaderLine('x', '{"type":"session","version":0,"id":"x","createdAt":5}')).toEqual({ version: 0, id: 'x', createdAt: 5, delegationDepth: 0 })
    expect(() => parseHeaderLine('x', '{"type":"session","version":0,"id":"y","createdAt":5}')).toThrow(/names session "y"/)
  })
})

// The wire codec alone (no server): the shared wire vectors of the Go package wire
// (wire/testdata/vectors.json, also read by wire/vectors_test.go), and the decoder's details.
import { readFileSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import {
  RECORD_FORMAT_BLOBS, RECORD_FORMAT_CHUNKS, blobChunkSubject, blobChunksFilter, blobHeaderValue, blobName, decodeRecord, encodeEventLine, encodeLines, errorsSubject, headerLine, headerWireSize, idFromToken, parseBlobRef,
  parseHeaderLine, partition, recordHeaders, sessionSubject, token, type WireEvent,
} from '../src/wire.ts'

/** A vector string: a string, or {repeat, count} for repeat written count times. */
type Text = string | { repeat: string, count: number }
const text = (t: Text): string => typeof t === 'string' ? t : t.repeat.repeat(t.count)

interface Ref { seq: number, size: number, sha256: string, id: string, chunks?: number }
interface Vectors {
  tokens: { id: string, token: string }[]
  badIds: { id: Text, rule: string }[]
  longestIds: { id: Text, tokenBytes: number }[]
  badTokens: Text[]
  partitions: { token: string, partitions: number, partition: number }[]
  subjects: { id: string, partitions: number, subject: string, errorsSubject: string }[]
  records: { id: string, events: WireEvent[], headers: Record<string, string>, body: string }[]
  decodes: { name: string, headers: Record<string, string[]>, body: string, seqs: number[], blobs: { index: number, ref: Ref }[] }[]
  decodeRefusals: { name: string, headers: Record<string, string[]>, body: string, rule: string }[]
  blobRefs: { value: string, ref: Ref, token: string, name: string }[]
  badBlobValues: string[]
  chunkBlobRefs: { value: string, ref: Ref, token: string, subjects: string[], filter: string }[]
  badChunkBlobValues: string[]
  headerWireSizes: { headers: [string, string][], size: number }[]
  projectionKeys: { unit: string, id: string, key: string }[]
}

const vectors: Vectors = JSON.parse(readFileSync(new URL('../../../wire/testdata/vectors.json', import.meta.url), 'utf8'))
const values = (h: Record<string, string[]>) => (k: string) => h[k] ?? []

describe('the shared wire vectors (wire/testdata/vectors.json)', () => {
  it('maps ids to tokens and back, and refuses what the encoding cannot produce', () => {
    expect(vectors.tokens.length).toBeGreaterThan(0)
    for (const { id, token: tok } of vectors.tokens) {
      expect(token(id), id).toBe(tok)
      expect(idFromToken(tok)).toBe(id)
    }
    for (const { id, rule } of vectors.badIds) expect(() => token(text(id))).toThrow(new RegExp(rule))
    for (const { id, tokenBytes } of vectors.longestIds) {
      expect(token(text(id))).toHaveLength(tokenBytes)
      expect(idFromToken(token(text(id)))).toBe(text(id))
    }
    for (const tok of vectors.badTokens) expect(() => idFromToken(text(tok)), JSON.stringify(tok)).toThrow()
  })

  it('partitions as FNV-1a 32 mod n, and names the subjects', () => {
    for (const c of vectors.partitions) expect(partition(c.token, c.partitions), `${c.token} mod ${c.partitions}`).toBe(c.partition)
    for (const c of vectors.subjects) {
      expect(sessionSubject(c.id, c.partitions)).toBe(c.subject)
      expect(errorsSubject(c.id)).toBe(c.errorsSubject)
    }
    // agentlog_projections keys are <unit>.<token> (PROTOCOL.md §8).
    for (const c of vectors.projectionKeys) expect(`${c.unit}.${token(c.id)}`).toBe(c.key)
  })

  it('encodes records byte for byte as the Go encoder', () => {
    for (const c of vectors.records) {
      expect(encodeLines(c.id, c.events).join('\n'), c.id).toBe(c.body)
      expect(Object.fromEntries(recordHeaders(token(c.id), c.events[0]!.seq, c.events.length))).toEqual(c.headers)
      expect(decodeRecord(values(Object.fromEntries(Object.entries(c.headers).map(([k, v]) => [k, [v]]))), c.body, 1).events.map(e => e.seq))
        .toEqual(c.events.map(e => e.seq))
    }
  })

  it('decodes records and refuses broken ones with the rule the Go decoder names', () => {
    for (const c of vectors.decodes) {
      const dec = decodeRecord(values(c.headers), c.body, 7)
      expect(dec.events.map(e => e.seq), c.name).toEqual(c.seqs)
      expect(dec.blobs, c.name).toEqual(c.blobs)
    }
    for (const c of vectors.decodeRefusals) {
      expect(() => decodeRecord(values(c.headers), c.body, 7), c.name).toThrow(new RegExp(`\\(rule ${c.rule}\\)`))
    }
  })

  it('names offloaded events and counts header bytes as the Go side', () => {
    for (const c of vectors.blobRefs) {
      expect(parseBlobRef(c.value)).toEqual(c.ref)
      expect(blobHeaderValue(c.ref)).toBe(c.value)
      expect(blobName(c.token, c.ref)).toBe(c.name)
    }
    for (const v of vectors.badBlobValues) expect(parseBlobRef(v), v).toBeNull()
    expect(vectors.chunkBlobRefs.length).toBeGreaterThan(0)
    for (const c of vectors.chunkBlobRefs) {
      expect(parseBlobRef(c.value, RECORD_FORMAT_CHUNKS)).toEqual(c.ref)
      expect(parseBlobRef(c.value, RECORD_FORMAT_BLOBS), c.value).toBeNull()
      expect(blobHeaderValue(c.ref)).toBe(c.value)
      expect(c.subjects.map((_, k) => blobChunkSubject(c.token, c.ref.id, k))).toEqual(c.subjects)
      expect(blobChunksFilter(c.token, c.ref.id)).toBe(c.filter)
    }
    for (const v of vectors.badChunkBlobValues) expect(parseBlobRef(v, RECORD_FORMAT_CHUNKS), v).toBeNull()
    for (const c of vectors.headerWireSizes) expect(headerWireSize(c.headers)).toBe(c.size)
  })
})

describe('tokens (JavaScript strings)', () => {
  it('refuses a lone surrogate, which is not UTF-8 (a case JSON vectors cannot carry)', () => {
    expect(() => token('\ud800')).toThrow(/id-utf8/)
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
})

describe('metadata', () => {
  it('writes the reference JSONL header line and reads Go-written ones', () => {
    expect(headerLine({ version: 0, id: 'x', createdAt: 5, cwd: '/w', parentSession: 'p', seedLength: 3 }))
      .toBe('{"type":"session","version":0,"id":"x","createdAt":5,"cwd":"/w","parentSession":"p","seedLength":3,"delegationDepth":0}')
    expect(parseHeaderLine('x', '{"type":"session","version":0,"id":"x","createdAt":5}')).toEqual({ version: 0, id: 'x', createdAt: 5, delegationDepth: 0 })
    expect(() => parseHeaderLine('x', '{"type":"session","version":0,"id":"y","createdAt":5}')).toThrow(/names session "y"/)
  })
})

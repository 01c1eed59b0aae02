// The JetStream error classifier: nats-server's codes, as JetStreamApiError carries them. 10164 (a
// guarded publish while the subject has a message in flight) occurs only on a replicated stream,
// which the test stack does not run, so it is checked here.
import { describe, expect, it } from 'vitest'
import { JetStreamApiError, JetStreamError } from '@nats-io/jetstream'
import { isBatchDuplicateMsgId, isNoMessageFound, isStreamNotFound, isWrongLastSequence } from '../src/errors.ts'

const api = (code: number, err_code: number, description: string) => new JetStreamApiError({ code, err_code, description })

describe('JetStream error classifier', () => {
  const wrongLast = api(400, 10071, 'wrong last sequence: 7')
  const inFlight = api(400, 10164, 'wrong last sequence: unknown')
  const batchDup = api(400, 10201, 'atomic publish batch contains duplicate message id')
  const noStream = api(404, 10059, 'stream not found')
  const noMsg = api(404, 10037, 'no message found')
  const other = api(503, 10008, 'JetStream system temporarily unavailable')

  it('wrong last sequence: 10071 and 10164, nothing else', () => {
    expect(isWrongLastSequence(wrongLast)).toBe(true)
    expect(isWrongLastSequence(inFlight)).toBe(true)
    for (const e of [batchDup, noStream, noMsg, other, new JetStreamError('wrong last sequence'), new Error('x'), undefined, 10071]) {
      expect(isWrongLastSequence(e)).toBe(false)
    }
  })

  it('each other code by its own helper', () => {
    expect([batchDup, wrongLast, inFlight].map(isBatchDuplicateMsgId)).toEqual([true, false, false])
    expect([noStream, noMsg, other].map(isStreamNotFound)).toEqual([true, false, false])
    expect([noMsg, noStream, other].map(isNoMessageFound)).toEqual([true, false, false])
  })
})

// The plugin config alone (no server): the JetStream domain, from the config or the environment.
import { afterEach, describe, expect, it } from 'vitest'
import { parseConfig } from '../src/config.ts'

describe('config domain', () => {
  const saved = { a: process.env.AGENTLOG_JS_DOMAIN, n: process.env.NATS_JS_DOMAIN }
  afterEach(() => {
    for (const [k, v] of [['AGENTLOG_JS_DOMAIN', saved.a], ['NATS_JS_DOMAIN', saved.n]] as const) {
      if (v === undefined) delete process.env[k]
      else process.env[k] = v
    }
  })

  it('is none by default', () => {
    delete process.env.AGENTLOG_JS_DOMAIN
    delete process.env.NATS_JS_DOMAIN
    expect(parseConfig({ servers: 'nats://127.0.0.1:4222' }).domain).toBeUndefined()
  })

  it('comes from the config, else AGENTLOG_JS_DOMAIN, else NATS_JS_DOMAIN', () => {
    process.env.NATS_JS_DOMAIN = 'n'
    expect(parseConfig({ servers: 'nats://x' }).domain).toBe('n')
    process.env.AGENTLOG_JS_DOMAIN = 'a'
    expect(parseConfig({ servers: 'nats://x' }).domain).toBe('a')
    expect(parseConfig({ servers: 'nats://x', domain: 'hub' }).domain).toBe('hub')
    expect(parseConfig({ servers: 'nats://x', domain: '' }).domain).toBeUndefined()
  })

  it('refuses a domain that is not one subject token, naming it', () => {
    for (const bad of ['a.b', 'a b', '*', '>']) {
      expect(() => parseConfig({ servers: 'nats://x', domain: bad })).toThrow(/domain .*one subject token/)
    }
  })
})

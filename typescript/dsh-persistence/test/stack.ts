// Helpers shared by the specs: the agentlog stack (from global-setup), isolated namespaces, the CLI.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { inject } from 'vitest'
import { connect } from '@nats-io/transport-node'
import { jetstreamManager } from '@nats-io/jetstream'
import type { Config, NamesConfig } from '../src/index.ts'

export const natsUrl = (): string => inject('natsUrl')
export const agentlogBin = (): string => inject('agentlogBin')
/** The Go publisher process of the fault and race tests (integration_test/writer). */
export const writerBin = (): string => inject('writerBin')

let counter = 0
const runId = Math.random().toString(36).slice(2, 8)

/** Fresh names for an isolated store (a stream and buckets of its own), provisioned on first use. */
export function isolatedConfig(extra: Partial<Config> = {}): { config: Config; names: Required<NamesConfig>; cleanup: () => Promise<void> } {
  const n = `${runId}${++counter}`
  const names: Required<NamesConfig> = {
    stream: `ALTEST_${n}`,
    subjectPrefix: `altest.${n}.session`,
    sessionsBucket: `altest_${n}_sessions`,
    errorsStream: `ALTEST_${n}_ERRORS`,
    errorsPrefix: `altest.${n}.errors`,
    writersBucket: `altest_${n}_writers`,
    blobsBucket: `altest_${n}_blobs`,
    blobStream: `ALTEST_${n}_BLOBS`,
    blobPrefix: `altest.${n}.blob`,
  }
  const config: Config = { servers: natsUrl(), names, provision: { partitions: 4 }, ...extra }
  const cleanup = async () => {
    const nc = await connect({ servers: natsUrl() })
    try {
      const jsm = await jetstreamManager(nc)
      for (const s of [names.stream, `KV_${names.sessionsBucket}`, `KV_${names.writersBucket}`, names.errorsStream, `OBJ_${names.blobsBucket}`, names.blobStream]) {
        await jsm.streams.delete(s).catch(() => {})
      }
    } finally {
      await nc.close()
    }
  }
  return { config, names, cleanup }
}

/** The default agentlog names on the test stack (what the Go CLI reads). */
export function agentlogConfig(extra: Partial<Config> = {}): Config {
  return { servers: natsUrl(), ...extra }
}

const pexec = promisify(execFile)

/** Run the agentlog CLI against the test stack; resolves with stdout, rejects with stderr. */
export async function agentlog(...args: string[]): Promise<string> {
  try {
    const { stdout } = await pexec(agentlogBin(), ['--nats', natsUrl(), ...args], { maxBuffer: 256 << 20 })
    return stdout
  } catch (err) {
    const e = err as { stderr?: string; message: string }
    throw new Error(`agentlog ${args.join(' ')}: ${e.stderr || e.message}`)
  }
}

/** Like {@link agentlog} but resolves with the exit code and both outputs. */
export async function agentlogResult(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await pexec(agentlogBin(), ['--nats', natsUrl(), ...args], { maxBuffer: 256 << 20 })
    return { code: 0, stdout, stderr }
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string }
    return { code: typeof e.code === 'number' ? e.code : 1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' }
  }
}

/** A unique session id for a test. */
export function uniqueId(prefix: string): string {
  return `${prefix}-${runId}-${++counter}`
}

// The reference's two contract suites, imported unchanged from ../shared/dsh-contract, run against
// a real agentlog stack. Every fixture gets a namespace of its own (stream, buckets); `mount`
// reopens the same namespace.
import { Context } from '@deepseek-ai/cordis'
import SessionStore from '@deepseek-ai/dsh-session'
import { runPersistenceContract } from '../../../../shared/dsh-contract/tests/contract.ts'
import { runCoordinatorContract, type CoordinatorFixture } from '../../../../shared/dsh-contract/tests/coordinator-contract.ts'
import AgentlogSessionPersistence from '../src/index.ts'
import { isolatedConfig } from './stack.ts'

runPersistenceContract('agentlog', async () => {
  const { config, cleanup } = isolatedConfig()
  const ctx = new Context()
  await ctx.plugin(SessionStore)
  const fiber = await ctx.plugin(AgentlogSessionPersistence, config)
  return {
    persistence: ctx.sessionPersistence,
    dispose: async () => { await fiber.dispose(); await cleanup() },
  }
})

runCoordinatorContract('agentlog', async (): Promise<CoordinatorFixture> => {
  const { config, cleanup } = isolatedConfig()
  return {
    mount: async ctx => ctx.plugin(AgentlogSessionPersistence, config),
    cleanup,
  }
})

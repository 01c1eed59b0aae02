import { fileURLToPath } from 'node:url'
import { defineConfig } from 'vitest/config'

const here = fileURLToPath(new URL('.', import.meta.url))

// The contract suites are imported from ../shared/dsh-contract (read-only, no node_modules of its
// own): their bare imports resolve from this package's node_modules.
export default defineConfig({
  resolve: {
    alias: [
      { find: /^@deepseek-ai\/([^/]+)$/, replacement: `${here}node_modules/@deepseek-ai/$1` },
      { find: /^vitest$/, replacement: `${here}node_modules/vitest/dist/index.js` },
    ],
  },
  server: { fs: { allow: [here, `${here}../../../shared`] } },
  test: {
    include: ['test/**/*.spec.ts'],
    globalSetup: ['./test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // One worker at a time: the machine is small and the tests share one agentlog stack.
    fileParallelism: false,
    pool: 'forks',
  },
})

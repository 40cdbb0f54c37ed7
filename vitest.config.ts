import { defineConfig } from 'vitest/config';

// Two projects: fast pure unit tests, and integration tests that spawn processes,
// touch real files, and talk to the real Docker engine.
export const config = defineConfig({
  test: {
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          setupFiles: ['test/helpers/no-spawn.ts'],
          testTimeout: 10_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          testTimeout: 120_000,
          hookTimeout: 300_000,
          fileParallelism: true,
        },
      },
    ],
  },
});

// vitest loads the default export of its config file; this is the one place a default export is needed.
// eslint-disable-next-line no-restricted-syntax
export default config;

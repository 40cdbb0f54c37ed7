// Test-only: `node --import <this file> …` with CAPSULE_MODULE_LOG=<file> appends every module the process
// loads to that file, one URL or path a line. ES modules are written by the resolve hook as they are
// resolved (nothing is lost when the process ends with process.exit); CommonJS modules that packages
// require() internally do not pass through those hooks on Node 20, so the require cache is added at exit.
import { appendFileSync } from 'node:fs';
import { createRequire, register } from 'node:module';

const log = process.env.CAPSULE_MODULE_LOG;
if (log !== undefined && log !== '') {
  register(new URL('./module-log-hooks.mjs', import.meta.url), { data: { log } });
  const require = createRequire(import.meta.url);
  process.on('exit', () => appendFileSync(log, `${Object.keys(require.cache).join('\n')}\n`));
}

import { describe, expect, it } from 'vitest';
import { createToolCatalog, READ_ONLY_TOOL_NAMES, TOOL_NAMES } from '../../../src/tools/catalog.js';

describe('the tool catalog', () => {
  const catalog = createToolCatalog({ env: {} });

  it('has every named tool once, in order (run_subagent and learn_capability are added by their session)', () => {
    expect(catalog.map((t) => t.name)).toEqual(
      TOOL_NAMES.filter((n) => n !== 'run_subagent' && n !== 'learn_capability'),
    );
  });

  it('a sub-agent’s read-only tools are all of kind READ_ONLY (the kind is what a mode allows)', () => {
    // The list is narrower than the kind: control tools (plan mode, sleep, reload) are READ_ONLY for
    // the modes but change the session, so a read-only sub-agent does not get them.
    for (const name of READ_ONLY_TOOL_NAMES) {
      expect(catalog.find((t) => t.name === name)?.kind, name).toBe('READ_ONLY');
    }
  });
});

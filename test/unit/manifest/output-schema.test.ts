import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { InputValidator } from '../../../src/manifest/input.js';
import { loadCapability } from '../../../src/manifest/load.js';
import { loadValid, makeCapability, tempProject, writeCapability } from '../../helpers/capability.js';

const SCHEMA = { type: 'object', properties: { n: { type: 'integer' } }, required: ['n'] };

describe('outputSchema', () => {
  it('is part of the content hash: loosening the schema alone changes it (a project grant is asked again)', async () => {
    const { root, capRoot } = await tempProject();
    const dir = await writeCapability(capRoot, 'c', { outputSchema: SCHEMA }, { 'run.sh': 'echo 1\n' });
    const before = await loadValid(dir, root, capRoot);
    await writeCapability(capRoot, 'c', { outputSchema: { type: 'object' } }, { 'run.sh': 'echo 1\n' });
    const after = await loadValid(dir, root, capRoot);
    expect(after.contentHash).not.toBe(before.contentHash);
  });

  it('an outputSchema that is not a JSON Schema makes the manifest invalid, naming the field', async () => {
    const { root, capRoot } = await tempProject();
    const dir = await writeCapability(
      capRoot,
      'c',
      { outputSchema: { type: 'object', properties: { n: { type: 'no-such-type' } } } },
      { 'run.sh': 'echo 1\n' },
    );
    const loaded = await loadCapability(dir, {
      root: capRoot,
      projectRoot: root,
      protectedPaths: [path.join(root, 'capsule.json')],
      inputValidator: new InputValidator(),
    });
    expect(loaded.ok).toBe(false);
    if (!loaded.ok)
      expect(loaded.invalid.issues).toContainEqual(
        expect.objectContaining({
          field: 'outputSchema',
          message: expect.stringMatching(/not a valid JSON Schema/),
        }),
      );
  });

  it('checkOutput: the value when it matches; otherwise the field, or that it is not JSON', async () => {
    const { capability } = await makeCapability('c', 'echo 1\n', { outputSchema: SCHEMA });
    const v = new InputValidator();
    expect(v.checkOutput(capability, '{"n": 2}\n')).toEqual({ ok: true, value: { n: 2 } });
    expect(v.checkOutput(capability, '{"n": "2"}')).toMatchObject({
      ok: false,
      message: expect.stringMatching(/output\.n must be integer/),
    });
    expect(v.checkOutput(capability, '{}')).toMatchObject({
      ok: false,
      message: expect.stringMatching(/must have required property 'n'/),
    });
    expect(v.checkOutput(capability, 'n=2')).toMatchObject({
      ok: false,
      message: expect.stringMatching(/not JSON/),
    });
    // Two JSON documents are not one output: a capability cannot append a second, "valid" one.
    expect(v.checkOutput(capability, '{"n":"x"}{"n":1}')).toMatchObject({ ok: false });
    const { capability: plain } = await makeCapability('p', 'echo 1\n');
    expect(v.checkOutput(plain, 'anything')).toBeUndefined();
  });

  it('a schema that points elsewhere ($ref to a URL) fails the run, never fetched, never passed', async () => {
    const { capability } = await makeCapability('r', 'echo 1\n', {
      outputSchema: { type: 'object', properties: { n: { $ref: 'https://schemas.example.test/n.json' } } },
    });
    expect(new InputValidator().checkOutput(capability, '{"n": 1}')).toMatchObject({
      ok: false,
      message: expect.stringMatching(/cannot be compiled/),
    });
  });
});

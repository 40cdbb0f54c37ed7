import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseProfile, ProfileCatalog } from '../../../src/agent/profile.js';
import { tempProject } from '../../helpers/capability.js';

const fm = (body: string) => `---\n${body}\n---\nThe prompt.\n`;

describe('profile parsing', () => {
  it('parses front matter and keeps the body as the prompt; unknown keys are ignored', () => {
    const p = parseProfile(
      fm(
        'name: mine\ndescription: d\ntools: [read_file, run_command]\nmode: edit\nallow: ["run_command(npm test)"]\nmodel: future-field',
      ),
      'mine.md',
    );
    expect(p).toMatchObject({
      name: 'mine',
      tools: ['read_file', 'run_command'],
      mode: 'edit',
      allow: ['run_command(npm test)'],
      deny: [],
      subagent: false,
      prompt: 'The prompt.',
    });
  });

  it.each([
    ['name: x\ndescription: d\ntools: [read_file, rm_rf]', /x\.md: tools\[1\] "rm_rf" is not a capsule tool/],
    [
      'name: x\ndescription: d\ntools: [read_file]\nmode: yolo',
      /x\.md: mode must be one of default, plan, edit, bypass/,
    ],
    ['name: x\ntools: [read_file]', /x\.md: description is required/],
    ['description: d\ntools: [read_file]', /x\.md: name is required/],
    ['name: x\ndescription: d', /x\.md: tools is/],
    ['name: x\ndescription: d\ntools: [read_file]\ndeny: ["Bad Rule("]', /x\.md: deny\[0\]/],
    ['name: [unclosed', /x\.md: front matter is not valid YAML/],
  ])('rejects %j with the file and field', (body, message) => {
    expect(() => parseProfile(fm(body), 'x.md')).toThrow(message);
  });

  it('rejects a file without front matter', () => {
    expect(() => parseProfile('# just markdown\n', 'x.md')).toThrow(/x\.md: has no YAML front matter/);
  });
});

describe('profile catalog', () => {
  it('has the built-ins, and a project profile (in .capsule/profiles) next to them', async () => {
    const { root } = await tempProject();
    await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
    await writeFile(
      path.join(root, '.capsule', 'profiles', 'tester.md'),
      fm('name: tester\ndescription: runs tests\ntools: [run_command]\nallow: ["run_command(npm test)"]'),
    );
    await writeFile(
      path.join(root, '.capsule', 'profiles', 'broken.md'),
      fm('name: broken\ndescription: d\ntools: [nope]'),
    );
    const catalog = await ProfileCatalog.load({ projectRoot: root });
    expect(catalog.names()).toEqual(['broken', 'build', 'explore', 'plan', 'reviewer', 'subagent', 'tester']);
    // Read-only git sub-commands only, never a blanket git rule.
    expect(catalog.get('reviewer').allow).toContain('run_command(git diff *)');
    expect(catalog.get('reviewer').allow).not.toContain('run_command(git *)');
    expect(catalog.get('plan').mode).toBe('plan');
    expect(catalog.get('subagent').subagent).toBe(true);
    expect(catalog.get('tester').source).toBe(path.join(root, '.capsule', 'profiles', 'tester.md'));
    expect(() => catalog.get('broken')).toThrow(/broken\.md: tools\[0\] "nope" is not a capsule tool/);
    expect(() => catalog.get('nobody')).toThrow(/No profile named "nobody"/);
  });

  it('built-in profiles are trusted as this process; a project profile, even one replacing a built-in, is persistent', async () => {
    const { root } = await tempProject();
    await mkdir(path.join(root, '.capsule', 'profiles'), { recursive: true });
    await writeFile(
      path.join(root, '.capsule', 'profiles', 'reviewer.md'),
      fm('name: reviewer\ndescription: mine\ntools: "*"\nmode: bypass\nallow: ["run_command"]'),
    );
    const catalog = await ProfileCatalog.load({ projectRoot: root });
    expect(catalog.get('build').trust).toBe('process');
    expect(catalog.get('plan').trust).toBe('process');
    expect(catalog.get('reviewer')).toMatchObject({ trust: 'persistent', mode: 'bypass' });
    // Parsing alone never vouches for a file.
    expect(parseProfile(fm('name: x\ndescription: d\ntools: "*"'), 'x.md').trust).toBe('persistent');
  });
});

describe('profile folders', () => {
  it('a profiles folder that is there but cannot be read is an error naming it, not "no profiles"', async () => {
    const { root } = await tempProject();
    await mkdir(path.join(root, '.capsule'), { recursive: true });
    // A file where the folder should be: readdir fails with ENOTDIR (as root, EACCES cannot be made).
    await writeFile(path.join(root, '.capsule', 'profiles'), 'not a folder');
    await expect(ProfileCatalog.load({ projectRoot: root })).rejects.toMatchObject({
      code: 'PROFILE_INVALID',
      details: { file: path.join(root, '.capsule', 'profiles') },
    });
  });
});

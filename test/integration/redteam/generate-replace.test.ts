import { lstatSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import type { ElicitResult } from '@modelcontextprotocol/sdk/types.js';
import { afterEach, describe, expect, it } from 'vitest';
import { agentFixture, codeOf } from '../../helpers/agent-fixture.js';
import { tempProject, writeCapability, writeManifestText } from '../../helpers/capability.js';
import { choose, connectCapsule, textOf, type McpHarness } from '../mcp/mcp-client.js';

// Attacks on what a generate_* call may touch, through a real MCP client against the built server: a
// name another root already holds, a folder that is not a capability (the project's own source, when the
// project root is listed as a root), a capability root itself, and a capability replaced with overwrite.
// Judged by effect: every file of the person's folders byte-identical afterwards (unless the replacement
// was asked for and shown), no staging folder left behind, and what the prompt said.

const open: McpHarness[] = [];
afterEach(async () => {
  while (open.length > 0) await open.pop()?.close();
});

/** Every file under `dir`, relative, with its bytes; symlinks as their target. */
function files(dir: string, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const rel = `${prefix}${e.name}`;
    const full = path.join(dir, e.name);
    if (rel === '.capsule') continue; // capsule's own state (the audit log)
    if (lstatSync(full).isSymbolicLink()) out[rel] = 'symlink';
    else if (e.isDirectory()) Object.assign(out, files(full, `${rel}/`));
    else out[rel] = readFileSync(full, 'utf8');
  }
  return out;
}

const leftovers = (dir: string): string[] => readdirSync(dir).filter((n) => n.startsWith('.capsule-gen'));

/** A project whose capsule.json lists the project root itself and a second root beside `capabilities`. */
async function project(): Promise<{ root: string; capRoot: string; more: string }> {
  const { root, capRoot } = await tempProject('capsule-redteam-genreplace-');
  const more = path.join(root, 'more');
  await mkdir(more);
  await writeFile(path.join(root, 'capsule.json'), JSON.stringify({ roots: ['capabilities', 'more', '.'] }));
  await mkdir(path.join(root, 'src'));
  await writeFile(path.join(root, 'src', 'main.c'), 'int main(void) { return 0; }\n');
  await writeFile(path.join(capRoot, 'notes'), 'a file, not a folder\n');
  await writeCapability(more, 'theirs', {}, { 'run.sh': 'echo theirs\n' });
  await writeCapability(capRoot, 'mine', {}, { 'run.sh': 'echo mine\n', 'notes.txt': 'keep\n' });
  return { root, capRoot, more };
}

async function connect(root: string, answer: () => ElicitResult): Promise<McpHarness> {
  const h = await connectCapsule({ cwd: root, answer });
  open.push(h);
  return h;
}

const generate = (h: McpHarness, args: Record<string, unknown>) =>
  h.client.callTool({
    name: 'generate_shell_capability',
    arguments: { description: 'the agent wrote this', script: 'echo agent\n', ...args },
  });

describe('red team: a generate_* call touches only the folder it names', () => {
  it('refuses a name in another root, a non-capability folder and a root, with or without overwrite, asking nothing', async () => {
    const { root, capRoot, more } = await project();
    const before = files(root);
    const h = await connect(root, () => choose('AlwaysThisSession'));
    const attempts: Array<Record<string, unknown>> = [
      { name: 'theirs' },
      { name: 'theirs', overwrite: true },
      { name: 'theirs', root: '.', overwrite: true },
      { name: 'src', root: '.' },
      { name: 'src', root: '.', overwrite: true },
      { name: 'capabilities', root: '.', overwrite: true },
      { name: 'more', root: '.', overwrite: true },
      { name: 'notes', overwrite: true },
    ];
    const results = [];
    for (const args of attempts) results.push({ args, r: await generate(h, args) });
    // Nothing on disk changed or was left behind, and nobody was asked (refused before the prompt).
    expect(files(root)).toEqual(before);
    for (const dir of [root, capRoot, more]) expect(leftovers(dir)).toEqual([]);
    expect(h.elicitations).toEqual([]);
    for (const { args, r } of results) {
      expect(r.isError, `${JSON.stringify(args)}: ${textOf(r)}`).toBe(true);
      expect(textOf(r), JSON.stringify(args)).toMatch(/nothing was written/);
    }
  });

  it('a folder whose manifest is invalid is not a capability: overwrite refuses and keeps it', async () => {
    const { root, capRoot } = await project();
    await writeManifestText(path.join(capRoot, 'broken'), '{"schemaVersion":1,"name":"broken"');
    await writeFile(path.join(capRoot, 'broken', 'work.txt'), 'hours of work\n');
    const before = files(root);
    const h = await connect(root, () => choose('Once'));
    const r = await generate(h, { name: 'broken', overwrite: true });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/not a valid capability/);
    expect(files(root)).toEqual(before);
    expect(h.elicitations).toEqual([]);
  });

  it('replacing a capability is its own question naming it and its hash; denied, the files stay', async () => {
    const { root, capRoot } = await project();
    let answer: ElicitResult = choose('Deny');
    const h = await connect(root, () => answer);
    const listed = JSON.parse(
      textOf(await h.client.callTool({ name: 'list_capabilities', arguments: {} })),
    ) as { capabilities: Array<{ name: string; contentHash: string }> };
    const hash = listed.capabilities.find((c) => c.name === 'mine')?.contentHash;
    expect(hash).toMatch(/^sha256:/);
    const before = files(root);

    const denied = await generate(h, { name: 'mine', overwrite: true });
    expect(denied.isError).toBe(true);
    expect(files(root)).toEqual(before);
    expect(leftovers(capRoot)).toEqual([]);
    const asked = h.elicitations.at(-1)?.message ?? '';
    expect(asked).toContain('permission needed: generate_capability:shell:replace:mine');
    expect(asked).toContain(`REPLACES the capability "mine" at capabilities/mine (content ${hash})`);

    // A yes to writing new capabilities for the session does not cover replacing one.
    answer = choose('AlwaysThisSession');
    expect((await generate(h, { name: 'fresh' })).isError).toBeFalsy();
    answer = choose('Deny');
    expect((await generate(h, { name: 'mine', overwrite: true })).isError).toBe(true);
    expect(files(path.join(capRoot, 'mine'))).toEqual({
      'capability.json': before['capabilities/mine/capability.json'],
      'notes.txt': 'keep\n',
      'run.sh': 'echo mine\n',
    });

    // Asked for and shown: replaced, and only that folder.
    answer = choose('Once');
    const done = await generate(h, { name: 'mine', overwrite: true });
    expect(done.isError, textOf(done)).toBeFalsy();
    expect(JSON.parse(textOf(done))).toMatchObject({ replaced: true, replacedContentHash: hash });
    expect(readFileSync(path.join(capRoot, 'mine', 'run.sh'), 'utf8')).toBe('echo agent\n');
    const after = files(root);
    for (const [file, bytes] of Object.entries(before)) {
      if (!file.startsWith('capabilities/mine/')) expect(after[file], file).toBe(bytes);
    }
    expect(leftovers(capRoot)).toEqual([]);
  });
});

describe('red team: failures found after staging leave nothing behind', () => {
  const wasm = new Uint8Array([0, 0x61, 0x73, 0x6d, 0x0d, 0, 1, 0]);

  it('the capability shown in the prompt changed while the new one was built: refused, the edit kept', async () => {
    const at = { root: '', capRoot: '' };
    const f = await agentFixture({
      answers: ['Once', 'Once'],
      componentize: async () => {
        // The person edits their capability while capsule builds the replacement.
        await writeFile(
          path.join(at.capRoot, 'mine', 'source.js'),
          'export function run() { return "edited"; }',
        );
        return wasm;
      },
    });
    Object.assign(at, { root: f.root, capRoot: f.capRoot });
    await writeCapability(f.capRoot, 'mine', {
      environment: 'wasm',
      entry: 'm.wasm',
      interpreter: undefined,
    });
    await writeFile(path.join(f.capRoot, 'mine', 'm.wasm'), wasm);
    expect((await f.session.call('describe_capability', { name: 'mine' })) as object).toMatchObject({
      name: 'mine',
    });
    const code = await codeOf(
      f.session.call('generate_wasm_capability', {
        name: 'mine',
        description: 'agent',
        source: 'export function run(i) { return i; }',
        overwrite: true,
      }),
    );
    expect(code).toBe('ALREADY_EXISTS');
    expect(readFileSync(path.join(f.capRoot, 'mine', 'source.js'), 'utf8')).toContain('edited');
    expect(readdirSync(path.join(f.capRoot, 'mine')).sort()).toEqual([
      'capability.json',
      'm.wasm',
      'source.js',
    ]);
    expect(readdirSync(f.capRoot)).toEqual(['mine']);
  });

  it('a folder of the same name appeared while the new one was built: refused, it stays as it was', async () => {
    const at = { root: '', capRoot: '' };
    const f = await agentFixture({
      answers: ['Once'],
      componentize: async () => {
        await mkdir(path.join(at.capRoot, 'race'));
        await writeFile(path.join(at.capRoot, 'race', 'person.txt'), 'mine\n');
        return wasm;
      },
    });
    Object.assign(at, { root: f.root, capRoot: f.capRoot });
    const code = await codeOf(
      f.session.call('generate_wasm_capability', {
        name: 'race',
        description: 'agent',
        source: 'export function run(i) { return i; }',
        overwrite: true,
      }),
    );
    expect(code).toBe('ALREADY_EXISTS');
    expect(files(path.join(f.capRoot, 'race'))).toEqual({ 'person.txt': 'mine\n' });
    expect(readdirSync(f.capRoot)).toEqual(['race']);
  });

  it('the name appeared in another root while the new one was built: refused, nothing written anywhere', async () => {
    const at = { root: '', capRoot: '' };
    const f = await agentFixture({
      answers: ['Once'],
      roots: ['capabilities', 'more'],
      componentize: async () => {
        await writeCapability(path.join(at.root, 'more'), 'late', {}, { 'run.sh': 'echo person\n' });
        return wasm;
      },
    });
    Object.assign(at, { root: f.root, capRoot: f.capRoot });
    await mkdir(path.join(f.root, 'more'));
    const code = await codeOf(
      f.session.call('generate_wasm_capability', {
        name: 'late',
        description: 'agent',
        source: 'export function run(i) { return i; }',
      }),
    );
    expect(code).toBe('ALREADY_EXISTS');
    expect(readdirSync(f.capRoot)).toEqual([]);
    expect(files(path.join(f.root, 'more', 'late'))).toMatchObject({ 'run.sh': 'echo person\n' });
    expect(((await f.session.call('describe_capability', { name: 'late' })) as { dir: string }).dir).toBe(
      'more/late',
    );
  });
});

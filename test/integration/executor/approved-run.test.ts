import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import wabtInit from 'wabt';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentSession } from '../../../src/agent/agent-session.js';
import { ProfileCatalog } from '../../../src/agent/profile.js';
import { hashFiles, walkFolder } from '../../../src/manifest/hash.js';
import { MemoryAuditSink } from '../../../src/permissions/audit/memory-sink.js';
import { createCommandParser } from '../../../src/permissions/commands/parser.js';
import { PermissionEngine } from '../../../src/permissions/engine.js';
import type { Prompter } from '../../../src/permissions/prompter.js';
import { Registry } from '../../../src/registry/registry.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import type { Runner } from '../../../src/runners/types.js';
import { DockerRunner } from '../../../src/runners/docker/runner.js';
import { WasmRunner } from '../../../src/runners/wasm/wasm-runner.js';
import { loadValid, tempProject, writeCapability, writeManifestText } from '../../helpers/capability.js';
import { choose, connectCapsule, textOf } from '../mcp/mcp-client.js';
import { assemble } from '../runners/wasm/helpers.js';

// The attacker is the agent: while the person is being asked to approve run_capability, it rewrites
// what they are approving. Whatever it swaps, the bytes that were hashed and shown are the bytes that run.

const wabt = await wabtInit();
const EMPTY_WASM = wabt
  .parseWat('empty.wat', '(module (memory (export "memory") 1) (func (export "_start")))')
  .toBinary({}).buffer;

const sessions: AgentSession[] = [];
afterEach(async () => {
  for (const s of sessions.splice(0)) await s.close();
});

interface Fixture {
  root: string;
  capRoot: string;
  session: AgentSession;
  audit: MemoryAuditSink;
}

/** A prompter that lets the "agent" act while the run_capability question is open, then answers Once. */
function swappingPrompter(whileAsked: () => Promise<void>): Prompter {
  return {
    interactive: true,
    async ask(question) {
      if (question.key.startsWith('run_capability:')) await whileAsked();
      return 'Once';
    },
  };
}

async function fixture(
  whileAsked: (f: Fixture) => Promise<void>,
  options: { runners?: (f: Omit<Fixture, 'session'>) => Runner[]; mode?: 'edit' | 'default' } = {},
): Promise<Fixture> {
  const { root, capRoot } = await tempProject('capsule-approved-');
  await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  const audit = new MemoryAuditSink();
  const partial = { root, capRoot, audit };
  const self: { fixture?: Fixture } = {};
  const commands = await createCommandParser();
  const gate = await PermissionEngine.create({
    projectRoot: root,
    prompter: swappingPrompter(() => whileAsked(self.fixture as Fixture)),
    audit,
    commandParser: commands,
  });
  const profiles = await ProfileCatalog.load({ projectRoot: root });
  const session = await AgentSession.create({
    projectRoot: root,
    env: process.env,
    registry: new Registry({
      roots: ['capabilities'],
      projectRoot: root,
      protectedPaths: [path.join(root, 'capsule.json'), path.join(root, '.capsule')],
    }),
    runners: options.runners?.(partial) ?? [new ShellRunner()],
    gate,
    commands,
    profiles,
    profile: profiles.get('build'),
  });
  sessions.push(session);
  if (options.mode !== undefined) session.gate.setMode(options.mode);
  self.fixture = { ...partial, session };
  return self.fixture;
}

/** The content hash of a folder as it was before the attack (a copy, hashed by the loader's rules). */
async function hashOf(dir: string): Promise<string> {
  const copy = await mkdtemp(path.join(tmpdir(), 'capsule-hashcopy-'));
  await cp(dir, copy, { recursive: true });
  const walk = await walkFolder(copy);
  const hash = await hashFiles(copy, walk.files);
  await rm(copy, { recursive: true, force: true });
  return hash;
}

function ranHash(audit: MemoryAuditSink, name: string): string | undefined {
  const allow = audit.events.filter((e) => e.key === `run_capability:${name}` && e.decision === 'allow');
  return allow.at(-1)?.contentHash;
}

describe('what runs is what was approved (shell)', () => {
  it('the agent rewrites the entry with write_file while the prompt is open: the approved script runs', async () => {
    const f = await fixture(
      async (f) => {
        await f.session.call('write_file', {
          path: 'capabilities/swap/run.sh',
          content: `touch ${path.join(f.root, 'swapped')}\n`,
        });
      },
      { mode: 'edit' },
    );
    const dir = await writeCapability(
      f.capRoot,
      'swap',
      {},
      { 'run.sh': `touch ${path.join(f.root, 'original')}\n` },
    );
    const approved = await hashOf(dir);
    await f.session.call('run_capability', { name: 'swap', input: {} });
    // The write really happened (the attack was possible) …
    expect(await readFile(path.join(dir, 'run.sh'), 'utf8')).toContain('swapped');
    // … but what ran is what was shown, and the audit record names it.
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'swap')).toBe(approved);
  });

  it('a file the entry sources is swapped during the prompt: the approved copy is sourced', async () => {
    const f = await fixture(async (f) => {
      await writeFile(path.join(f.capRoot, 'lib', 'lib.sh'), `touch ${path.join(f.root, 'swapped')}\n`);
    });
    const dir = await writeCapability(
      f.capRoot,
      'lib',
      {},
      {
        'run.sh': '. ./lib.sh\n',
        'lib.sh': `touch ${path.join(f.root, 'original')}\n`,
      },
    );
    const approved = await hashOf(dir);
    await f.session.call('run_capability', { name: 'lib', input: {} });
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'lib')).toBe(approved);
  });

  it('the whole folder is replaced by a symlink to other code during the prompt: the approved folder runs', async () => {
    const f = await fixture(async (f) => {
      const evil = path.join(f.capRoot, '.evil');
      await writeManifestText(
        evil,
        await readFile(path.join(f.capRoot, 'folder', 'capability.json'), 'utf8'),
      );
      await writeFile(path.join(evil, 'run.sh'), `touch ${path.join(f.root, 'swapped')}\n`, {
        mode: 0o755,
      });
      await rename(path.join(f.capRoot, 'folder'), path.join(f.capRoot, '.old'));
      await symlink(evil, path.join(f.capRoot, 'folder'));
    });
    const dir = await writeCapability(
      f.capRoot,
      'folder',
      {},
      { 'run.sh': `touch ${path.join(f.root, 'original')}\n` },
    );
    const approved = await hashOf(dir);
    await f.session.call('run_capability', { name: 'folder', input: {} });
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'folder')).toBe(approved);
  });

  it('a swap between the gate decision and the runner start does not change what runs', async () => {
    // The runner itself lets the agent act first: the decision is made, the process has not started.
    const late: { swap?: () => Promise<void> } = {};
    const f = await fixture(async () => {}, {
      runners: () => {
        const shell = new ShellRunner();
        return [
          {
            environment: 'shell',
            available: () => shell.available(),
            close: () => shell.close(),
            async run(request, permit) {
              await late.swap?.();
              return shell.run(request, permit);
            },
          },
        ];
      },
    });
    const dir = await writeCapability(
      f.capRoot,
      'late',
      {},
      { 'run.sh': `touch ${path.join(f.root, 'original')}\n` },
    );
    late.swap = () => writeFile(path.join(dir, 'run.sh'), `touch ${path.join(f.root, 'swapped')}\n`);
    const approved = await hashOf(dir);
    await f.session.call('run_capability', { name: 'late', input: {} });
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'late')).toBe(approved);
  });

  it('a top-level cases.json that is the entry is part of the content hash', async () => {
    const { root, capRoot } = await tempProject();
    const dir = await writeCapability(
      capRoot,
      'cased',
      { entry: 'cases.json' },
      { 'cases.json': 'echo one\n' },
    );
    const before = (await loadValid(dir, root, capRoot)).contentHash;
    await writeFile(path.join(dir, 'cases.json'), `touch ${path.join(root, 'swapped')}\n`);
    const after = (await loadValid(dir, root, capRoot)).contentHash;
    expect(after).not.toBe(before);
  });

  it('a cases.json the manifest does not name is not reachable by the code (and editing it keeps the hash)', async () => {
    const f = await fixture(async (f) => {
      await writeFile(path.join(f.capRoot, 'reach', 'cases.json'), `touch ${path.join(f.root, 'swapped')}\n`);
    });
    const dir = await writeCapability(
      f.capRoot,
      'reach',
      {},
      {
        // Sources its own cases.json: only what the hash covers may run.
        'run.sh': `if [ -f cases.json ]; then . ./cases.json; fi; touch ${path.join(f.root, 'original')}\n`,
        'cases.json': '[]\n',
      },
    );
    const before = (await loadValid(dir, f.root, f.capRoot)).contentHash;
    await f.session.call('run_capability', { name: 'reach', input: {} });
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    // Editing the checks of a capability does not revoke its grants.
    expect((await loadValid(dir, f.root, f.capRoot)).contentHash).toBe(before);
  });
});

describe('what runs is what was approved (wasm)', () => {
  it('the .wasm artifact is swapped during the prompt: the approved module runs', async () => {
    const f = await fixture(
      async (f) => {
        await writeFile(path.join(f.capRoot, 'art', 'art.wasm'), assemble('probe.wat'));
      },
      { runners: () => [new WasmRunner({})] },
    );
    await mkdir(path.join(f.root, 'out'));
    const dir = await writeCapability(
      f.capRoot,
      'art',
      {
        description: 'does nothing (the probe it is swapped for writes out/marker)',
        environment: 'wasm',
        entry: 'art.wasm',
        interpreter: undefined,
        args: ['write', 'marker'],
        grants: { fs: [{ path: 'out', mode: 'rw' }] },
      },
      { 'art.wasm': EMPTY_WASM },
    );
    const approved = await hashOf(dir);
    const result = (await f.session.call('run_capability', { name: 'art', input: {} })) as {
      exitCode: number;
    };
    expect(existsSync(path.join(f.root, 'out', 'marker'))).toBe(false);
    expect(result.exitCode).toBe(0);
    expect(ranHash(f.audit, 'art')).toBe(approved);
  });
});

describe('what runs is what was approved (docker)', () => {
  it('the entry is swapped during the prompt: the bind-mounted folder is the approved copy', async () => {
    const f = await fixture(
      async (f) => {
        await writeFile(path.join(f.capRoot, 'box', 'run.sh'), 'touch /project/out/swapped\n');
      },
      { runners: () => [new DockerRunner({ env: process.env, prewarm: 0 })] },
    );
    const out = path.join(f.root, 'out');
    await mkdir(out);
    // The sandbox user (65534) writes the markers through the rw grant.
    await chmod(out, 0o777);
    const dir = await writeCapability(
      f.capRoot,
      'box',
      {
        environment: 'docker',
        docker: { image: 'capsule/busybox:1' },
        grants: { fs: [{ path: 'out', mode: 'rw' }] },
      },
      { 'run.sh': 'touch /project/out/original\n' },
    );
    const approved = await hashOf(dir);
    const result = (await f.session.call('run_capability', { name: 'box', input: {} })) as {
      exitCode: number;
      stderr: string;
    };
    expect(result.exitCode, result.stderr).toBe(0);
    expect(existsSync(path.join(out, 'swapped'))).toBe(false);
    expect(existsSync(path.join(out, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'box')).toBe(approved);
  });
});

describe('what runs is what was approved (one decision for several runs: compare, ci)', () => {
  it('the entry is swapped while the plan is being approved: every run of the plan runs the approved copy', async () => {
    const f = await fixture(async (f) => {
      await writeFile(path.join(f.capRoot, 'planned', 'run.sh'), `touch ${path.join(f.root, 'swapped')}\n`);
    });
    const dir = await writeCapability(
      f.capRoot,
      'planned',
      {},
      { 'run.sh': `touch ${path.join(f.root, 'original')}\n` },
    );
    const approved = await hashOf(dir);
    const plan = await f.session.executor.planVariants('planned', ['shell']);
    try {
      const permit = await f.session.executor.approve(plan);
      const variant = plan.variants[0];
      if (variant?.ok !== true) throw new Error('shell variant expected');
      for (let i = 0; i < 2; i++) await f.session.executor.runApproved(permit, variant.capability, '{}');
    } finally {
      await plan.release();
    }
    expect(existsSync(path.join(f.root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(f.root, 'original'))).toBe(true);
    expect(ranHash(f.audit, 'planned')).toBe(approved);
  });
});

describe('what runs is what was approved (capsule mcp, a real MCP client)', () => {
  it('the client rewrites the entry before it answers the elicitation: the approved script runs', async () => {
    const { root, capRoot } = await tempProject('capsule-approved-mcp-');
    await writeFile(path.join(root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
    const dir = await writeCapability(
      capRoot,
      'viamcp',
      {},
      { 'run.sh': `touch ${path.join(root, 'original')}\n` },
    );
    const approved = await hashOf(dir);
    const h = await connectCapsule({
      cwd: root,
      answer: async () => {
        await writeFile(path.join(dir, 'run.sh'), `touch ${path.join(root, 'swapped')}\n`);
        return choose('Once');
      },
    });
    try {
      const r = await h.client.callTool({ name: 'run_capability', arguments: { name: 'viamcp', input: {} } });
      expect(r.isError, textOf(r)).toBeFalsy();
    } finally {
      await h.close();
    }
    expect(existsSync(path.join(root, 'swapped'))).toBe(false);
    expect(existsSync(path.join(root, 'original'))).toBe(true);
    // The audit log on disk names the hash of what ran.
    const lines = (await readFile(path.join(root, '.capsule', 'audit.jsonl'), 'utf8')).trim().split('\n');
    const allow = lines
      .map((l) => JSON.parse(l) as { key: string; decision: string; contentHash?: string })
      .filter((e) => e.key === 'run_capability:viamcp' && e.decision === 'allow');
    expect(allow.at(-1)?.contentHash).toBe(approved);
  });
});

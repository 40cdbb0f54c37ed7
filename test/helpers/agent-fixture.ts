import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { AgentSession, type PlanApproval } from '../../src/agent/agent-session.js';
import { ProfileCatalog } from '../../src/agent/profile.js';
import { readProjectConfigFile } from '../../src/project/project-config.js';
import { createCommandParser } from '../../src/permissions/commands/parser.js';
import { PermissionEngine } from '../../src/permissions/engine.js';
import {
  createNonInteractivePrompter,
  createScriptedPrompter,
  type Prompter,
} from '../../src/permissions/prompter.js';
import { Registry } from '../../src/registry/registry.js';
import { ShellRunner } from '../../src/runners/shell-runner.js';
import type { AskAnswer } from '../../src/permissions/types.js';
import type { Clock } from '../../src/permissions/session-allowlist.js';
import type { Componentize } from '../../src/tools/ports.js';
import { tempProject } from './capability.js';

export interface Fixture {
  root: string;
  capRoot: string;
  session: AgentSession;
  asked: () => string[];
}

/** A temp project with capsule.json, an engine with scripted answers, and an agent session. */
export async function agentFixture(
  options: {
    answers?: AskAnswer[];
    profile?: string;
    grants?: string[];
    approvePlan?: PlanApproval;
    componentize?: Componentize;
    config?: Record<string, unknown>;
    /** Replace the scripted prompter (MCP tests pass the elicitation prompter). */
    prompter?: Prompter;
    /** Capability roots, relative to the project (default: capabilities). */
    roots?: string[];
    /** The engine's clock (session grants with a time expire by it). */
    clock?: Clock;
  } = {},
): Promise<Fixture> {
  const { root, capRoot } = await tempProject('capsule-agent-');
  const configFile = path.join(root, 'capsule.json');
  await writeFile(configFile, JSON.stringify({ schemaVersion: 1, ...(options.config ?? {}) }, null, 2));
  const config = (await readProjectConfigFile(configFile)).config;
  const prompter = createScriptedPrompter(options.answers ?? []);
  const commands = await createCommandParser();
  const gate = await PermissionEngine.create({
    projectRoot: root,
    config,
    sessionGrants: options.grants ?? [],
    prompter: options.prompter ?? prompter,
    audit: false,
    commandParser: commands,
    clock: options.clock,
  });
  const profiles = await ProfileCatalog.load({ projectRoot: root });
  const session = await AgentSession.create({
    projectRoot: root,
    env: process.env,
    registry: new Registry({
      roots: options.roots ?? ['capabilities'],
      projectRoot: root,
      protectedPaths: [configFile, path.join(root, '.capsule')],
    }),
    runners: [new ShellRunner()],
    gate,
    commands,
    profiles,
    profile: profiles.get(options.profile ?? 'build'),
    componentize: options.componentize,
    approvePlan: options.approvePlan,
    childGate: async ({ grants, profile }) =>
      PermissionEngine.create({
        projectRoot: root,
        config: { ...config, allowlist: {} },
        mode: profile.mode,
        sessionGrants: grants,
        prompter: createNonInteractivePrompter(),
        audit: false,
        commandParser: commands,
      }),
  });
  return { root, capRoot, session, asked: () => prompter.asked.map((q) => q.key) };
}

/** Resolves to the CapsuleError code a promise rejects with (or 'resolved'). */
export async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'resolved';
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
}

import { existsSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import {
  ElicitRequestSchema,
  type ElicitRequest,
  type ElicitResult,
} from '@modelcontextprotocol/sdk/types.js';
import { BUILT_CLI } from '../../helpers/cli.js';

export interface McpHarness {
  client: Client;
  /** Every elicitation the server sent, in order. */
  elicitations: ElicitRequest['params'][];
  stderr: () => string;
  /** Process id of the server. */
  pid: number | null;
  close(): Promise<void>;
}

export interface ConnectOptions {
  cwd: string;
  args?: string[];
  /** Answer elicitations; undefined: the client does not declare elicitation at all. */
  answer?: (params: ElicitRequest['params']) => ElicitResult | Promise<ElicitResult>;
  /** Extra environment for the server (e.g. CAPSULE_STATE_DIR). */
  env?: Record<string, string>;
}

const stateDirs = new Map<string, Promise<string>>();

function stateDirFor(cwd: string): Promise<string> {
  let dir = stateDirs.get(cwd);
  if (dir === undefined) {
    dir = mkdtemp(path.join(tmpdir(), 'capsule-mcp-state-'));
    stateDirs.set(cwd, dir);
  }
  return dir;
}

/** The real SDK client over stdio against the built `capsule mcp` (run `npm run build` first). */
export async function connectCapsule(options: ConnectOptions): Promise<McpHarness> {
  if (!existsSync(BUILT_CLI)) throw new Error(`${BUILT_CLI} is missing: run "npm run build" first`);
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [BUILT_CLI, 'mcp', ...(options.args ?? [])],
    cwd: options.cwd,
    stderr: 'pipe',
    env: {
      PATH: process.env.PATH ?? '/usr/bin:/bin',
      HOME: process.env.HOME ?? '/tmp',
      // Confirmed policies and audit heads of throwaway projects stay out of the user's own state
      // folder; two servers on one project share one, as two sessions of one user do.
      CAPSULE_STATE_DIR: options.env?.CAPSULE_STATE_DIR ?? (await stateDirFor(options.cwd)),
      ...options.env,
    },
  });
  let err = '';
  transport.stderr?.on('data', (c: Buffer) => (err += c.toString()));
  const client = new Client(
    { name: 'capsule-test', version: '1.0.0' },
    { capabilities: options.answer !== undefined ? { elicitation: { form: {} } } : {} },
  );
  const elicitations: ElicitRequest['params'][] = [];
  if (options.answer !== undefined) {
    const answer = options.answer;
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicitations.push(request.params);
      return answer(request.params);
    });
  }
  await client.connect(transport);
  return { client, elicitations, stderr: () => err, pid: transport.pid, close: () => client.close() };
}

/** An elicitation answer choosing one permission option (or declining). */
export function choose(decision: 'Once' | 'AlwaysThisSession' | 'AlwaysThisProject' | 'Deny'): ElicitResult {
  return { action: 'accept', content: { decision } };
}

export function textOf(result: unknown): string {
  const content = (result as { content?: Array<{ type: string; text?: string }> }).content ?? [];
  return content.map((c) => c.text ?? '').join('\n');
}

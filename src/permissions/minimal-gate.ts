import type { AskAnswer, Decision, PermissionGate, PermissionRequest } from './types.js';

export type Prompter = (request: PermissionRequest) => Promise<AskAnswer>;

/**
 * The smallest honest gate: exact session grants, else ask the prompter (deny by default).
 * Stands in until the full engine (allowlists, ceiling, modes, rules) is wired in.
 */
export class MinimalGate implements PermissionGate {
  private readonly grants: Set<string>;
  private readonly prompter: Prompter;

  constructor(options: { sessionGrants?: readonly string[]; prompter?: Prompter } = {}) {
    this.grants = new Set(options.sessionGrants ?? []);
    this.prompter = options.prompter ?? (async () => 'Deny');
  }

  async check(request: PermissionRequest): Promise<Decision> {
    const key = request.key.raw;
    if (this.grants.has(key)) {
      return {
        outcome: 'allow',
        source: 'session-allowlist',
        reason: `${key} is granted for this session`,
        key,
      };
    }
    const answer = await this.prompter(request);
    if (answer === 'Deny') {
      return {
        outcome: 'deny',
        source: 'prompt',
        reason: `Permission ${key} was not granted. Allow it with --grant ${key}.`,
        key,
      };
    }
    if (answer !== 'Once') this.grants.add(key);
    return { outcome: 'allow', source: 'prompt', reason: `${key} allowed (${answer})`, key };
  }
}

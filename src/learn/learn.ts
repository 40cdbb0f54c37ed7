import { cp, lstat, mkdtemp, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import path from 'node:path';
import { loadCases, type CapabilityCase } from '../cases/cases.js';
import { judgeCase } from '../ci/judge-case.js';
import { sameOutput } from '../compare/compare.js';
import { writeFileAtomic } from '../base/atomic-write.js';
import { parseStrictJson } from '../base/strict-json.js';
import { CapsuleError } from '../base/errors.js';
import type { Executor } from '../executor/executor.js';
import { sandboxImageFor } from '../executor/variants.js';
import { inputDocumentText } from '../manifest/input.js';
import type { Manifest } from '../manifest/schema.js';
import { MANIFEST_FILE } from '../project/environments.js';
import type { Capability, Environment } from '../manifest/types.js';
import type { Observation, RunResult } from '../runners/types.js';
import { classify, type LearnPlace, type ObservedEntry, type OutsideEntry } from './classify.js';

export type Grants = Manifest['grants'];

/** One input a capability learns from: a `--input` or a case of its cases.json. */
export interface LearnInput {
  name: string;
  input: unknown;
  /** Set for a case: the proof judges it too. */
  check?: CapabilityCase | undefined;
}

export interface ProofRun {
  input: string;
  /** Same stdout and exit code as the learning run (compare's rule). */
  equal: boolean;
  exitCode: number | null;
  /** A case's verdict in the target environment (undefined for a `--input`). */
  casePassed?: boolean | undefined;
  caseMessage?: string | undefined;
  /** The start of its stderr, when its output differs (why, most often). */
  stderr?: string | undefined;
}

export interface GrantCheck {
  grant: string;
  /** Its removal changed no output: flagged as unneeded. */
  unneeded: boolean;
}

export interface Proof {
  /** Proved: every re-run agreed with the learning run and every case passed. */
  ok: boolean;
  environment: Environment;
  runs: ProofRun[];
  /** Each proposed grant dropped in turn (only where the target enforces grants). */
  minimality: GrantCheck[];
  /** Why minimality was not checked, when it was not. */
  minimalityNote?: string | undefined;
  /** Why the proof failed, in words. */
  failure?: string | undefined;
  /** What the re-runs were compared with, when not the learning run. */
  reference?: string | undefined;
}

export interface LearnReport {
  proposal: {
    capability: string;
    /** What would be written: this capability's grants, or a new promoted one beside it. */
    target: { name: string; environment: Environment; image?: string | undefined };
    grants: Grants;
    /** The manifest's grants today, for the diff. */
    current: Grants;
    /** What the runners could not observe (the proposal does not guess it). */
    unobserved: string[];
    /**
     * The ceiling for the target with exactly these grants, judged as at run time: sandboxed (it may be
     * allowed for the project) or not (a session grant at most), and why — a rw grant writes to the host.
     */
    ceiling?:
      { sandboxed: boolean; highest: 'AlwaysThisProject' | 'AlwaysThisSession'; why: string } | undefined;
  };
  observed: ObservedEntry[];
  outside: OutsideEntry[];
  proof: Proof;
}

/** A proposal proved and ready to write; remove() drops its folder when it is not written. */
export interface Learned {
  report: LearnReport;
  write(): Promise<string>;
  remove(): Promise<void>;
}

export interface LearnOptions {
  executor: Executor;
  name: string;
  /** Explicit inputs; none: the cases of its cases.json. */
  inputs?: readonly LearnInput[] | undefined;
  promote?: 'docker' | 'wasm' | undefined;
  place: Omit<LearnPlace, 'ownDirs' | 'home' | 'tmp'>;
  signal?: AbortSignal | undefined;
  onProgress?: ((message: string) => void) | undefined;
}

const UNOBSERVED: Partial<Record<Environment, string[]>> = {
  docker: [
    'files: the container sees only its granted paths and its own files; what it looked for elsewhere is not seen',
    'environment variables read',
    'network reached other than through capsule (the container has no network of its own)',
  ],
};

/**
 * learn → propose → prove: run the capability through the gate as a learning run (the same key, prompt,
 * ceiling and audit record as any run, marked as learning) for each input, observe what it reaches, sort it
 * into a proposal, then re-run the same inputs with exactly the proposed grants in the target environment
 * and compare. Nothing is written here: write() on the result does that, after a person's yes.
 */
export async function learnCapability(options: LearnOptions): Promise<Learned> {
  const { executor, name } = options;
  const original = await executor.registry.get(name);
  const manifestText = await readFile(original.manifestPath, 'utf8');
  const inputs = options.inputs ?? (await casesAsInputs(original));
  if (options.promote === 'wasm') {
    throw new CapsuleError(
      'UNSUPPORTED',
      `"${name}" cannot be promoted to wasm: only capabilities authored as a JavaScript module (wasm with "source") run there.`,
      { hint: 'Promote a shell capability run by sh or node with --promote docker.' },
    );
  }
  const targetEnv: Environment = options.promote ?? original.environment;
  const image =
    options.promote === 'docker'
      ? original.environment === 'docker'
        ? original.manifest.docker?.image
        : sandboxImageFor(original.manifest.interpreter)
      : undefined;
  if (options.promote === 'docker' && image === undefined) {
    throw new CapsuleError(
      'UNSUPPORTED',
      `"${name}" has no sandbox image for its interpreter (${original.manifest.interpreter ?? 'none: its entry runs itself'}).`,
      { field: 'interpreter', hint: 'Promotion to docker needs "interpreter": "sh" or "node".' },
    );
  }

  // 1. Learn: the capability as written, through the gate, observed.
  const learned = await learningRuns(options, inputs);
  const place: LearnPlace = {
    ...options.place,
    ownDirs: [original.dir, learned.stagedDir],
    home: homedir(),
    tmp: tmpdir(),
  };
  const sorted = classify(learned.observations, place);
  const grants: Grants = { ...sorted.grants, env: [...original.manifest.grants.env] };
  const unobserved = [...new Set(learned.unobserved)];
  if (original.manifest.grants.env.length > 0 && unobserved.some((u) => u.startsWith('environment')))
    unobserved.push(`grants.env is kept as the manifest has it (${original.manifest.grants.env.join(', ')})`);
  const targetName = options.promote === undefined ? name : `${name}-${options.promote}`;
  const report: LearnReport = {
    proposal: {
      capability: name,
      target: { name: targetName, environment: targetEnv, image },
      grants,
      current: original.manifest.grants,
      unobserved,
    },
    observed: sorted.observed,
    outside: sorted.outside,
    proof: { ok: false, environment: targetEnv, runs: [], minimality: [] },
  };

  // 2. Prove: the candidate — exactly what would be written — run with the same inputs where it would run.
  const work = await mkdtemp(path.join(tmpdir(), 'capsule-learn-'));
  const remove = (): Promise<void> => rm(work, { recursive: true, force: true });
  try {
    const manifest = candidateManifest(manifestText, original, { name: targetName, grants, image });
    const candidateDir = await writeCandidate(work, 'candidate', original, targetName, manifest);
    const loaded = await executor.registry.loadCandidate(candidateDir);
    if (!loaded.ok) {
      const first = loaded.invalid.issues[0];
      report.proof.failure =
        `the proposed manifest is refused: ${first?.field ?? ''} ${first?.message ?? ''}`.trim();
    } else {
      const isolation = executor.isolation(loaded.capability);
      const rw = grants.fs.filter((g) => g.mode === 'rw').map((g) => `${g.path} (rw)`);
      report.proposal.ceiling = {
        sandboxed: isolation.sandboxed,
        highest: isolation.sandboxed ? 'AlwaysThisProject' : 'AlwaysThisSession',
        why:
          !isolation.sandboxed && targetEnv !== 'shell' && rw.length > 0
            ? `a rw grant writes to the host: ${rw.join(', ')} — not sandboxed, so it can be allowed for this session at most (${isolation.summary})`
            : isolation.summary,
      };
      options.onProgress?.(`proving in ${targetEnv}`);
      // A learning run that was refused a request it now gets cannot print what a granted run prints: then
      // a first run with the proposed grants is the reference, and a second one must agree with it.
      let reference = learned.results;
      const refused = report.observed.filter((o) => o.outcome === 'refused' && o.verdict === 'proposed');
      if (refused.length > 0) {
        reference = (
          await proveRuns(executor, loaded.capability, targetEnv, inputs, undefined, options.signal)
        ).results;
        report.proof.reference = `a run with the proposed grants: the learning run was refused ${refused.length} call(s) it would now be granted`;
      }
      const { runs } = await proveRuns(
        executor,
        loaded.capability,
        targetEnv,
        inputs,
        reference,
        options.signal,
      );
      report.proof.runs = runs;
      const broken = runs.find((r) => !r.equal || r.casePassed === false);
      report.proof.ok = broken === undefined;
      if (broken !== undefined)
        report.proof.failure = !broken.equal
          ? `${broken.input}: its output with the proposed grants differs from the learning run's`
          : `${broken.input}: ${broken.caseMessage ?? 'the case failed'}`;
      if (report.proof.ok && targetEnv !== 'shell') {
        report.proof.minimality = await minimality(options, work, original, manifestText, {
          name: targetName,
          grants,
          image,
          targetEnv,
          inputs,
          expected: reference,
        });
      } else if (targetEnv === 'shell') {
        report.proof.minimalityNote =
          'not checked: a shell run is not confined to its grants, so dropping one changes nothing; promote it (--promote docker) to prove each grant';
      }
    }
    return {
      report,
      remove,
      write: async () => {
        if (!report.proof.ok)
          throw new CapsuleError('RUNNER_FAILED', 'The proof failed: nothing is written.');
        try {
          return await bind(original, manifestText, candidateDir, targetName, options.promote !== undefined);
        } finally {
          await remove();
        }
      },
    };
  } catch (err) {
    await remove();
    throw err;
  }
}

async function casesAsInputs(capability: Capability): Promise<LearnInput[]> {
  const cases = await loadCases(capability);
  if (cases === undefined) {
    throw new CapsuleError('USAGE', `"${capability.name}" has no cases.json and no --input was given.`, {
      hint: `Give the inputs to learn from: capsule learn ${capability.name} --input '{...}' (repeatable).`,
    });
  }
  return cases.map((c) => ({ name: c.name, input: c.input, check: c }));
}

async function learningRuns(
  options: LearnOptions,
  inputs: readonly LearnInput[],
): Promise<{ results: RunResult[]; observations: Observation[]; unobserved: string[]; stagedDir: string }> {
  const { executor } = options;
  const original = await executor.registry.get(options.name);
  const plan = await executor.planVariants(options.name, [original.environment]);
  try {
    const permit = await executor.approve(plan, { learning: true, signal: options.signal });
    const results: RunResult[] = [];
    const observations: Observation[] = [];
    const unobserved: string[] = [...(UNOBSERVED[original.environment] ?? [])];
    for (const input of inputs) {
      options.onProgress?.(`learning from ${input.name}`);
      const text = await executor.validateInput(plan.capability, inputDocumentText(input.input ?? {}));
      const result = await executor.runApproved(permit, plan.capability, text, options.signal, {
        learn: true,
      });
      if (result.canceled) throw new CapsuleError('CANCELED', 'Canceled: nothing was learned or written.');
      results.push(result);
      observations.push(...(result.observed?.observations ?? []));
      unobserved.push(...(result.observed?.unobserved ?? []));
    }
    return { results, observations, unobserved, stagedDir: plan.capability.dir };
  } finally {
    await plan.release();
  }
}

async function proveRuns(
  executor: Executor,
  candidate: Capability,
  environment: Environment,
  inputs: readonly LearnInput[],
  /** What each run must agree with (none: the runs are the reference). */
  expected: readonly RunResult[] | undefined,
  signal: AbortSignal | undefined,
): Promise<{ runs: ProofRun[]; results: RunResult[] }> {
  const plan = await executor.planVariants(candidate, [environment]);
  try {
    const permit = await executor.approve(plan, { learning: true, signal });
    const runs: ProofRun[] = [];
    const results: RunResult[] = [];
    for (const [i, input] of inputs.entries()) {
      const text = await executor.validateInput(plan.capability, inputDocumentText(input.input ?? {}));
      const result = await executor.runApproved(permit, plan.capability, text, signal);
      if (result.canceled) throw new CapsuleError('CANCELED', 'Canceled: nothing was written.');
      const broke = input.check === undefined ? undefined : judgeCase(input.check, result);
      results.push(result);
      const learnedRun = expected === undefined ? result : expected[i];
      const equal = learnedRun !== undefined && sameOutput(result, learnedRun);
      runs.push({
        input: input.name,
        equal,
        exitCode: result.exitCode,
        casePassed: input.check === undefined ? undefined : broke === undefined,
        caseMessage: broke?.message,
        stderr: equal ? undefined : result.stderr.slice(0, 2000),
      });
    }
    return { runs, results };
  } finally {
    await plan.release();
  }
}

/** Each grant dropped in turn: one whose removal changes no output is flagged as unneeded. */
async function minimality(
  options: LearnOptions,
  work: string,
  original: Capability,
  manifestText: string,
  c: {
    name: string;
    grants: Grants;
    image: string | undefined;
    targetEnv: Environment;
    inputs: readonly LearnInput[];
    expected: readonly RunResult[];
  },
): Promise<GrantCheck[]> {
  const checks: GrantCheck[] = [];
  const drops: Array<{ label: string; grants: Grants }> = [
    ...c.grants.fs.map((g, i) => ({
      label: `fs ${g.path} (${g.mode})`,
      grants: { ...c.grants, fs: c.grants.fs.filter((_, j) => j !== i) },
    })),
    ...c.grants.network.map((g, i) => ({
      label: `network ${g.host}:${(g.ports ?? [443, 80]).join(',')}`,
      grants: { ...c.grants, network: c.grants.network.filter((_, j) => j !== i) },
    })),
  ];
  for (const [n, drop] of drops.entries()) {
    options.onProgress?.(`minimality: without ${drop.label}`);
    const manifest = candidateManifest(manifestText, original, { ...c, grants: drop.grants });
    const dir = await writeCandidate(work, `drop-${n}`, original, c.name, manifest);
    const loaded = await options.executor.registry.loadCandidate(dir);
    if (!loaded.ok) {
      checks.push({ grant: drop.label, unneeded: false });
      continue;
    }
    const { runs } = await proveRuns(
      options.executor,
      loaded.capability,
      c.targetEnv,
      c.inputs,
      c.expected,
      options.signal,
    );
    checks.push({ grant: drop.label, unneeded: runs.every((r) => r.equal && r.casePassed !== false) });
  }
  return checks;
}

/** The manifest as written, with the proposed grants (and, promoted, its new name and environment). */
function candidateManifest(
  text: string,
  original: Capability,
  c: { name: string; grants: Grants; image: string | undefined },
): Record<string, unknown> {
  const parsed = parseStrictJson(text);
  if (!parsed.ok || typeof parsed.value !== 'object' || parsed.value === null) {
    throw new CapsuleError(
      'MANIFEST_INVALID',
      `${original.manifestPath} changed while learning; run learn again.`,
      {
        file: original.manifestPath,
      },
    );
  }
  const m = { ...(parsed.value as Record<string, unknown>) };
  m.name = c.name;
  m.grants = {
    fs: c.grants.fs.map((g) => ({ path: g.path, mode: g.mode })),
    network: c.grants.network,
    env: c.grants.env,
  };
  if (c.image !== undefined && original.environment !== 'docker') {
    m.environment = 'docker';
    m.docker = { image: c.image };
  }
  return m;
}

/** A copy of the capability's folder named `name` under `work/slot`, with the candidate manifest in it. */
async function writeCandidate(
  work: string,
  slot: string,
  original: Capability,
  name: string,
  manifest: Record<string, unknown>,
): Promise<string> {
  const dir = path.join(work, slot, name);
  await cp(original.dir, dir, { recursive: true, verbatimSymlinks: true });
  await writeFile(path.join(dir, MANIFEST_FILE), `${JSON.stringify(manifest, null, 2)}\n`);
  return dir;
}

/**
 * Write what was proved: the grants into capability.json (one atomic rename), or the promoted capability as
 * a new folder beside it (copied aside, then renamed into place: it appears whole or not at all).
 */
async function bind(
  original: Capability,
  manifestText: string,
  candidateDir: string,
  targetName: string,
  promoted: boolean,
): Promise<string> {
  // The manifest is what was learned from: one changed since then is not overwritten with a stale proposal.
  if ((await readFile(original.manifestPath, 'utf8')) !== manifestText) {
    throw new CapsuleError(
      'MANIFEST_INVALID',
      `${original.manifestPath} changed while learning: nothing is written.`,
      {
        file: original.manifestPath,
        hint: 'Run capsule learn again.',
      },
    );
  }
  if (!promoted) {
    await writeFileAtomic(
      original.manifestPath,
      await readFile(path.join(candidateDir, MANIFEST_FILE), 'utf8'),
    );
    return original.manifestPath;
  }
  const target = path.join(original.root, targetName);
  const aside = path.join(original.root, `.${targetName}.learn-${process.pid}`);
  // rename() would replace an empty folder: one that exists, empty or not, is never replaced.
  if (
    await lstat(target).then(
      () => true,
      () => false,
    )
  ) {
    throw new CapsuleError('ALREADY_EXISTS', `${target} already exists: nothing is written.`, {
      file: target,
      hint: 'Remove or rename it, then run capsule learn again.',
    });
  }
  await rm(aside, { recursive: true, force: true });
  try {
    await cp(candidateDir, aside, { recursive: true, verbatimSymlinks: true });
    await rename(aside, target);
  } catch (err) {
    await rm(aside, { recursive: true, force: true });
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTEMPTY') {
      throw new CapsuleError(
        'ALREADY_EXISTS',
        `${target} already exists: nothing is written.`,
        { file: target, hint: 'Remove or rename it, then run capsule learn again.' },
        { cause: err },
      );
    }
    throw err;
  }
  return path.join(target, MANIFEST_FILE);
}

import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import * as api from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createNonInteractivePrompter } from '../../../src/permissions/prompter.js';
import { openRuntime } from '../../../src/runtime/runtime.js';
import { ShellRunner } from '../../../src/runners/shell-runner.js';
import { defaultTelemetry, noTelemetry, otelTelemetry } from '../../../src/telemetry/telemetry.js';
import { tempProject, writeCapability } from '../../helpers/capability.js';
import { execa } from 'execa';
import { BUILT_CLI } from '../../helpers/cli.js';
import { choose, connectCapsule, type McpHarness } from '../mcp/mcp-client.js';

// Decision telemetry with the OpenTelemetry SDK's in-memory exporter: real engine, real shell runner.

const harnesses: McpHarness[] = [];
afterEach(async () => {
  for (const h of harnesses.splice(0)) await h.close();
});

beforeAll(() => {
  if (!existsSync(BUILT_CLI)) throw new Error('run "npm run build" first');
});

async function project() {
  const p = await tempProject('capsule-otel-');
  await writeFile(path.join(p.root, 'capsule.json'), '{ "schemaVersion": 1 }\n');
  await writeCapability(p.capRoot, 'ok', {}, { 'run.sh': 'echo ok\n' });
  await writeCapability(p.capRoot, 'boom', {}, { 'run.sh': 'echo bad >&2; exit 3\n' });
  await writeCapability(p.capRoot, 'secret', {}, { 'run.sh': `touch "${p.root}/secret-ran"\n` });
  await writeCapability(
    p.capRoot,
    'liar',
    { outputSchema: { type: 'object', required: ['n'], properties: { n: { type: 'integer' } } } },
    { 'run.sh': `printf '{"n": "x"}'\n` },
  );
  return p;
}

function memory() {
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  return { exporter, provider };
}

async function executorFor(root: string, telemetry: Parameters<typeof openRuntime>[0]['telemetry']) {
  const runtime = await openRuntime({
    cwd: root,
    grants: ['run_capability:ok', 'run_capability:boom', 'run_capability:liar'],
    runners: [new ShellRunner()],
    stateDir: false,
    telemetry,
  });
  return runtime.openExecutor(
    await runtime.openGate({ prompter: createNonInteractivePrompter(), audit: false }),
  );
}

const one = (spans: ReadableSpan[], key: string) => {
  const found = spans.filter((s) => s.attributes['capsule.key'] === key);
  expect(found, key).toHaveLength(1);
  return found[0] as ReadableSpan;
};

describe('decision telemetry (OpenTelemetry spans, GenAI execute_tool conventions)', () => {
  it('an allowed run, a denied call and a failed run each become one span with their attributes', async () => {
    const { root } = await project();
    const { exporter, provider } = memory();
    const executor = await executorFor(root, otelTelemetry(api, { provider }));
    try {
      const { capability } = await executor.run('ok', {});
      await expect(executor.run('secret', {})).rejects.toMatchObject({ code: 'PERMISSION_DENIED' });
      const failed = await executor.run('boom', {});
      expect(failed.result.exitCode).toBe(3);
      const lied = await executor.run('liar', {});
      expect(lied.result.outputInvalid).toMatch(/output\.n/);

      const spans = exporter.getFinishedSpans();
      expect(spans).toHaveLength(4);
      for (const s of spans) {
        expect(s.name).toBe('execute_tool run_capability');
        expect(s.kind).toBe(api.SpanKind.INTERNAL);
        expect(s.attributes['gen_ai.operation.name']).toBe('execute_tool');
        expect(s.attributes['gen_ai.tool.name']).toBe('run_capability');
        expect(s.instrumentationScope.name).toBe('capsule');
      }
      const ok = one(spans, 'run_capability:ok');
      expect(ok.attributes).toMatchObject({
        'capsule.decision': 'allow',
        'capsule.source': 'session-allowlist',
        'capsule.rule': 'run_capability:ok',
        'capsule.content_hash': capability.contentHash,
        'capsule.sandboxed': false,
        'capsule.run.exit_code': 0,
      });
      expect(String(ok.attributes['capsule.isolation'])).toMatch(/^shell: a host process/);
      expect(ok.status.code).toBe(api.SpanStatusCode.UNSET);
      expect(ok.attributes['error.type']).toBeUndefined();

      const denied = one(spans, 'run_capability:secret');
      expect(denied.attributes).toMatchObject({
        'capsule.decision': 'deny',
        'capsule.source': 'no-prompt',
        'capsule.denied_by': 'nobody',
        'error.type': 'PERMISSION_DENIED',
      });
      expect(denied.attributes['capsule.run.exit_code']).toBeUndefined();
      expect(denied.status.code).toBe(api.SpanStatusCode.ERROR);
      expect(existsSync(path.join(root, 'secret-ran'))).toBe(false);

      const boom = one(spans, 'run_capability:boom');
      expect(boom.attributes).toMatchObject({
        'capsule.decision': 'allow',
        'capsule.run.exit_code': 3,
        'error.type': 'exit_code',
      });
      expect(boom.status.code).toBe(api.SpanStatusCode.ERROR);

      const liar = one(spans, 'run_capability:liar');
      expect(liar.attributes).toMatchObject({ 'capsule.run.exit_code': 0, 'error.type': 'output_schema' });
      expect(String(liar.attributes['capsule.run.output_invalid'])).toMatch(/output\.n/);
      expect(liar.status.code).toBe(api.SpanStatusCode.ERROR);
    } finally {
      await executor.close();
    }
  });

  it('a plan approved once (compare, ci) gives a decision span and one span per run', async () => {
    const { root } = await project();
    const { exporter, provider } = memory();
    const executor = await executorFor(root, otelTelemetry(api, { provider }));
    try {
      const plan = await executor.planVariants('ok', ['shell']);
      const permit = await executor.approve(plan);
      const variant = plan.variants[0];
      if (variant === undefined || !variant.ok) throw new Error('no shell variant');
      await executor.runApproved(permit, variant.capability, '{}');
      await plan.release();
      const spans = exporter.getFinishedSpans();
      expect(spans.map((s) => s.attributes['capsule.decision'] ?? 'run')).toEqual(['allow', 'run']);
      expect(spans[1]?.attributes['capsule.run.exit_code']).toBe(0);
    } finally {
      await executor.close();
    }
  });

  it('nothing is recorded, and the API is not needed, until a tracer provider is registered', async () => {
    expect(await defaultTelemetry()).toBe(noTelemetry);
    const { exporter, provider } = memory();
    expect(api.trace.setGlobalTracerProvider(provider)).toBe(true);
    try {
      const { root } = await project();
      const telemetry = await defaultTelemetry();
      expect(telemetry).not.toBe(noTelemetry);
      // openRuntime with no telemetry option takes the registered provider's.
      const executor = await executorFor(root, undefined);
      await executor.run('ok', {});
      await executor.close();
      expect(exporter.getFinishedSpans().map((s) => s.attributes['capsule.key'])).toEqual([
        'run_capability:ok',
      ]);
    } finally {
      api.trace.disable();
    }
  });

  it('capsule mcp with an SDK preloaded by node --import exports a span per call, with the MCP request id', async () => {
    const { root } = await project();
    const spansFile = path.join(root, 'spans.jsonl');
    const h = await connectCapsule({
      cwd: root,
      answer: () => choose('Deny'),
      env: {
        NODE_OPTIONS: `--import ${path.join(import.meta.dirname, 'otel-preload.mjs')}`,
        CAPSULE_TEST_SPANS: spansFile,
      },
    });
    harnesses.push(h);
    const r = await h.client.callTool({ name: 'cap_secret', arguments: {} });
    expect(r.isError).toBe(true);
    await h.client.callTool({ name: 'list_capabilities', arguments: {} });
    await h.close();
    const spans = (await readFile(spansFile, 'utf8'))
      .trim()
      .split('\n')
      .map(
        (l) =>
          JSON.parse(l) as { name: string; attributes: Record<string, unknown>; status: { code: number } },
      );
    expect(spans.map((s) => s.name)).toEqual([
      'execute_tool run_capability',
      'execute_tool list_capabilities',
    ]);
    expect(spans[0]?.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'capsule.key': 'run_capability:secret',
      'capsule.decision': 'deny',
      'capsule.source': 'prompt',
      'capsule.denied_by': 'person',
    });
    expect(typeof spans[0]?.attributes['gen_ai.tool.call.id']).toBe('string');
    expect(spans[0]?.attributes['gen_ai.tool.call.id']).not.toBe(spans[1]?.attributes['gen_ai.tool.call.id']);
    expect(spans[1]?.attributes['capsule.decision']).toBeUndefined();
    expect(existsSync(path.join(root, 'secret-ran'))).toBe(false);
  });

  it('capsule run under node --import: the batched span is flushed before the process exits', async () => {
    const { root } = await project();
    const spansFile = path.join(root, 'run-spans.jsonl');
    const r = await execa(
      process.execPath,
      [
        '--import',
        path.join(import.meta.dirname, 'otel-preload.mjs'),
        BUILT_CLI,
        'run',
        'boom',
        '--grant',
        'run_capability:boom',
      ],
      {
        cwd: root,
        reject: false,
        env: { CAPSULE_TEST_SPANS: spansFile, CAPSULE_STATE_DIR: path.join(root, '.state') },
      },
    );
    expect(r.exitCode).toBe(3);
    const spans = (await readFile(spansFile, 'utf8'))
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { name: string; attributes: Record<string, unknown> });
    expect(spans).toHaveLength(1);
    expect(spans[0]).toMatchObject({
      name: 'execute_tool run_capability',
      attributes: {
        'capsule.key': 'run_capability:boom',
        'capsule.decision': 'allow',
        'capsule.run.exit_code': 3,
        'error.type': 'exit_code',
      },
    });
  });
});

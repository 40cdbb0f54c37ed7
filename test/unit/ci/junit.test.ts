import { XMLParser } from 'fast-xml-parser';
import { describe, expect, it } from 'vitest';
import { renderJunit } from '../../../src/ci/junit.js';

describe('renderJunit', () => {
  it('renders one testcase per case and environment, escaping hostile text', () => {
    const xml = renderJunit([
      { capability: 'a', environment: 'shell', caseName: 'ok', status: 'passed', durationMs: 12 },
      {
        capability: 'a',
        environment: 'wasm',
        caseName: 'ok',
        status: 'failed',
        message: 'got <b>"&\u0001',
        durationMs: 3,
        stdout: ']]>',
      },
      {
        capability: 'b',
        environment: 'docker',
        caseName: 'x',
        status: 'error',
        message: 'engine down',
        durationMs: 0,
      },
      {
        capability: 'b',
        environment: 'wasm',
        caseName: 'x',
        status: 'skipped',
        message: 'not portable',
        durationMs: 0,
      },
    ]);
    const doc = new XMLParser({ ignoreAttributes: false, attributeNamePrefix: '' }).parse(xml);
    expect(doc.testsuites).toMatchObject({ tests: '4', failures: '1', errors: '1', skipped: '1' });
    const [a, b] = doc.testsuites.testsuite;
    expect(a.testcase).toHaveLength(2);
    expect(a.testcase[1].failure.message).toBe('got <b>"&');
    expect(a.testcase[1]['system-out']).toBe(']]>');
    expect(b.testcase[0].error.message).toBe('engine down');
    expect(b.testcase[0].name).toBe('x [docker]');
    expect(b.testcase[1].skipped.message).toBe('not portable');
  });
});

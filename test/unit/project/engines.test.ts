import { describe, expect, it } from 'vitest';
import { resolveEngines, selectEngines } from '../../../src/project/engines.js';
import { parseProjectConfig } from '../../../src/project/project-config.js';
import { CapsuleError } from '../../../src/base/errors.js';

const sock = { type: 'docker', host: 'unix:///run/a.sock' } as const;

describe('engines in capsule.json', () => {
  it('accepts unix sockets and tcp with TLS', () => {
    const config = parseProjectConfig(
      JSON.stringify({
        engines: {
          a: sock,
          'build-2': {
            type: 'docker',
            host: 'tcp://10.0.0.2:2376',
            tls: { ca: 'ca.pem', cert: 'c.pem', key: 'k.pem' },
          },
        },
      }),
      'capsule.json',
    );
    expect(Object.keys(config.engines ?? {})).toEqual(['a', 'build-2']);
  });

  it('accepts a swarm by its manager; a tcp:// manager needs TLS too', () => {
    const config = parseProjectConfig(
      JSON.stringify({ engines: { sw: { type: 'swarm', manager: 'unix:///run/m.sock' } } }),
      'capsule.json',
    );
    expect(config.engines?.['sw']).toEqual({ type: 'swarm', manager: 'unix:///run/m.sock' });
    expect(() =>
      parseProjectConfig(
        JSON.stringify({ engines: { sw: { type: 'swarm', manager: 'tcp://m:2377' } } }),
        'capsule.json',
      ),
    ).toThrow(/engines\.sw\.tls/);
    expect(() =>
      parseProjectConfig(
        JSON.stringify({ engines: { sw: { type: 'swarm', host: 'unix:///x' } } }),
        'capsule.json',
      ),
    ).toThrow(CapsuleError);
  });

  it('refuses tcp:// without TLS, naming the field', () => {
    expect(() =>
      parseProjectConfig(
        JSON.stringify({ engines: { a: { type: 'docker', host: 'tcp://h:2375' } } }),
        'capsule.json',
      ),
    ).toThrow(/engines\.a\.tls/);
  });

  it('refuses a bad engine name, an unknown field and a host that is no engine address', () => {
    for (const engines of [
      { 'A b': sock },
      { a: { ...sock, privileged: true } },
      { a: { type: 'docker', host: 'http://x' } },
    ]) {
      expect(() => parseProjectConfig(JSON.stringify({ engines }), 'capsule.json')).toThrow(CapsuleError);
    }
  });

  it('defaults to no engines (the one local or DOCKER_HOST engine)', () => {
    expect(parseProjectConfig('{}', 'capsule.json').engines).toBeUndefined();
  });
});

describe('CAPSULE_ENGINES and --engine', () => {
  it('adds the variable’s engines (its name wins over the file’s)', () => {
    const other = { type: 'docker', host: 'unix:///run/b.sock' } as const;
    const merged = resolveEngines({ a: sock }, { CAPSULE_ENGINES: JSON.stringify({ a: other, c: other }) });
    expect(merged).toEqual({ a: other, c: other });
  });

  it('a variable that is not JSON or not engines is a usage error naming it', () => {
    for (const text of ['{', '{"a":{"type":"docker","host":"tcp://h:1"}}', '{"a":1,"a":2}']) {
      let err: unknown;
      try {
        resolveEngines({}, { CAPSULE_ENGINES: text });
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(CapsuleError);
      expect((err as CapsuleError).code).toBe('USAGE');
      expect((err as CapsuleError).details.field).toBe('CAPSULE_ENGINES');
    }
  });

  it('--engine picks named engines; an unknown one is a usage error listing the configured ones', () => {
    const engines = { a: sock, b: sock };
    expect(selectEngines(engines, undefined).map((e) => e.name)).toEqual(['a', 'b']);
    expect(selectEngines(engines, 'b').map((e) => e.name)).toEqual(['b']);
    expect(selectEngines(engines, 'b, a').map((e) => e.name)).toEqual(['b', 'a']);
    expect(() => selectEngines(engines, 'c')).toThrow(/--engine c: no such engine/);
    try {
      selectEngines(engines, 'c');
    } catch (e) {
      expect((e as CapsuleError).details.hint).toContain('a, b');
    }
  });
});

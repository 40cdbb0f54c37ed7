import { describe, expect, it } from 'vitest';
import { judgePosture, parseProbeOutput } from '../../../../src/runners/docker/posture.js';

const STRONG = 'CapEff=0000000000000000\nNoNewPrivs=1\nSeccomp=2\nuid=65534\nif=lo\nrootfs=ro\n';

describe('posture probe verdict', () => {
  it('a hardened call container measured with everything in force is a sandbox', () => {
    expect(judgePosture(parseProbeOutput(STRONG, 'runc'))).toEqual({ sandboxed: true, missing: [] });
  });

  it('each missing protection alone makes it not a sandbox, and says which', () => {
    const cases: Array<[string, string]> = [
      ['NoNewPrivs=1', 'no-new-privileges is off'],
      ['Seccomp=2', 'no seccomp filter'],
      ['CapEff=0000000000000000', 'capabilities'],
      ['uid=65534', 'runs as root'],
      ['rootfs=ro', 'root file system is writable'],
    ];
    const weaker: Record<string, string> = {
      'NoNewPrivs=1': 'NoNewPrivs=0',
      'Seccomp=2': 'Seccomp=0',
      'CapEff=0000000000000000': 'CapEff=00000000a80425fb',
      'uid=65534': 'uid=0',
      'rootfs=ro': 'rootfs=rw',
    };
    for (const [line, phrase] of cases) {
      const verdict = judgePosture(parseProbeOutput(STRONG.replace(line, weaker[line] ?? ''), 'runc'));
      expect(verdict.sandboxed).toBe(false);
      expect(verdict.missing.join('; ')).toContain(phrase);
    }
  });

  it('a network interface besides lo is a network', () => {
    const verdict = judgePosture(parseProbeOutput(`${STRONG}if=eth0\n`, 'runc'));
    expect(verdict).toMatchObject({ sandboxed: false, missing: ['has a network (eth0)'] });
  });

  it('a probe that printed nothing measured nothing: not a sandbox', () => {
    expect(judgePosture(parseProbeOutput('', 'runc')).sandboxed).toBe(false);
  });

  it('gVisor reports no seccomp mode of its own; the rest is still required', () => {
    expect(judgePosture(parseProbeOutput(STRONG.replace('Seccomp=2', 'Seccomp=0'), 'runsc')).sandboxed).toBe(
      true,
    );
    expect(
      judgePosture(parseProbeOutput(STRONG.replace('NoNewPrivs=1', 'NoNewPrivs=0'), 'runsc')).sandboxed,
    ).toBe(false);
  });
});

import { describe, expect, it } from 'vitest';
import { OutputDemuxer } from '../../../../src/runners/docker/demux.js';

function frame(type: number, payload: string | Buffer): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(body.length, 4);
  return Buffer.concat([header, body]);
}

describe('OutputDemuxer', () => {
  it('splits stdout and stderr frames', () => {
    const d = new OutputDemuxer(1024, () => {});
    d.push(Buffer.concat([frame(1, 'out1 '), frame(2, 'err1'), frame(1, 'out2')]));
    expect(d.stdout()).toBe('out1 out2');
    expect(d.stderr()).toBe('err1');
    expect(d.truncated).toBe(false);
  });

  it('reassembles headers and payloads split across chunks at every byte', () => {
    const all = Buffer.concat([frame(1, 'hello '), frame(2, 'warn'), frame(1, 'wörld')]);
    for (let cut = 1; cut < all.length; cut++) {
      const d = new OutputDemuxer(1024, () => {});
      d.push(all.subarray(0, cut));
      d.push(all.subarray(cut));
      expect(d.stdout()).toBe('hello wörld');
      expect(d.stderr()).toBe('warn');
    }
  });

  it('keeps exactly capBytes per stream and reports the overflow once', () => {
    let overflows = 0;
    const d = new OutputDemuxer(10, () => overflows++);
    d.push(frame(1, '0123456789ABCDEF'));
    d.push(frame(1, 'more'));
    d.push(frame(2, 'short'));
    expect(d.stdout()).toBe('0123456789');
    expect(d.stderr()).toBe('short');
    expect(d.truncated).toBe(true);
    expect(overflows).toBe(1);
  });

  it('does not buffer a huge frame it will drop: memory stays bounded while it arrives', () => {
    const d = new OutputDemuxer(16, () => {});
    const header = Buffer.alloc(8);
    header[0] = 1;
    header.writeUInt32BE(50 * 1024 * 1024, 4);
    d.push(header);
    const chunk = Buffer.alloc(64 * 1024, 0x41);
    for (let i = 0; i < 100; i++) d.push(chunk);
    expect(d.stdout()).toBe('A'.repeat(16));
    expect(d.truncated).toBe(true);
    // The partial frame is consumed as it comes: what is pending is a header, not megabytes.
    expect((d as unknown as { pending: Buffer }).pending.length).toBeLessThanOrEqual(8);
  });

  it('after dropping part of a frame, the next frame still parses', () => {
    const d = new OutputDemuxer(4, () => {});
    const big = frame(1, 'x'.repeat(100));
    d.push(big.subarray(0, 50));
    d.push(big.subarray(50));
    d.push(frame(2, 'ok'));
    expect(d.stdout()).toBe('xxxx');
    expect(d.stderr()).toBe('ok');
  });
});

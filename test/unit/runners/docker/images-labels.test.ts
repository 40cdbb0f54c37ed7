import { open } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { isStaticElf, parseLddOutput } from '../../../../src/runners/docker/images.js';
import { isOrphan } from '../../../../src/runners/docker/labels.js';

async function head(file: string): Promise<Buffer> {
  const handle = await open(file, 'r');
  try {
    const buffer = Buffer.alloc(4096);
    await handle.read(buffer, 0, buffer.length, 0);
    return buffer;
  } finally {
    await handle.close();
  }
}

describe('image recipe helpers', () => {
  it('tells a dynamically linked ELF (node) from garbage', async () => {
    const node = await head(process.execPath);
    expect(isStaticElf(node)).toBe(false);
    expect(isStaticElf(Buffer.from('#!/bin/sh\necho not elf\n'.padEnd(128)))).toBe(false);
  });

  it('recognises busybox-static as static', async () => {
    expect(isStaticElf(await head('/bin/busybox'))).toBe(true);
  });

  it('parses ldd output into the files to copy, loader included', () => {
    const text = [
      '\tlinux-vdso.so.1 (0x00007ffd)',
      '\tlibdl.so.2 => /lib/x86_64-linux-gnu/libdl.so.2 (0x00007f01)',
      '\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)',
      '\t/lib64/ld-linux-x86-64.so.2 (0x00007f03)',
    ].join('\n');
    expect(parseLddOutput(text)).toEqual([
      '/lib/x86_64-linux-gnu/libdl.so.2',
      '/lib/x86_64-linux-gnu/libc.so.6',
      '/lib64/ld-linux-x86-64.so.2',
    ]);
    expect(parseLddOutput('\tnot a dynamic executable')).toEqual([]);
  });
});

describe('isOrphan', () => {
  const labels = { 'capsule.managed': '1', 'capsule.host': 'h1', 'capsule.pid': '42' };
  it('is an orphan when its process on this host is gone', () => {
    expect(isOrphan(labels, 'h1', () => false)).toBe(true);
  });
  it('never reaps live processes, other hosts, or unmanaged containers', () => {
    expect(isOrphan(labels, 'h1', () => true)).toBe(false);
    expect(isOrphan(labels, 'h2', () => false)).toBe(false);
    expect(isOrphan({ ...labels, 'capsule.managed': '0' }, 'h1', () => false)).toBe(false);
  });
});

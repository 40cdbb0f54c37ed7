/**
 * wasi:io for the component host: errors, pollables and the two stream classes. A stream reads
 * from a ByteSource and writes to a ByteSink, so stdio (memory, capped) and granted files (host
 * descriptors) share one pair of classes — the glue checks `instanceof` on exactly these.
 */

/** Where an output stream's bytes go; throws to stop the guest (output cap) or to fail the write. */
export interface ByteSink {
  write(data: Uint8Array): void;
}

/** Where an input stream's bytes come from: undefined at the end. */
export interface ByteSource {
  read(len: number): Uint8Array | undefined;
}

/** A wasi:io error; `code` is the wasi:filesystem error-code when it came from a file. */
export class IoError {
  constructor(
    readonly message: string,
    readonly code?: string,
  ) {}
  toDebugString(): string {
    return this.message;
  }
}

export class Pollable {
  ready(): boolean {
    return true;
  }
  block(): void {}
}

/** A stream-error for a failed operation (the guest can ask filesystem-error-code for its code). */
export function streamFailure(err: IoError): { tag: 'last-operation-failed'; val: IoError } {
  return { tag: 'last-operation-failed', val: err };
}

/** Host reads and writes never block, so the largest read/write the guest may ask for at once. */
const CHUNK = 65_536;

export class InputStream {
  constructor(readonly source: ByteSource) {}
  read(len: bigint): Uint8Array {
    const chunk = this.source.read(Math.min(Number(len), CHUNK));
    if (chunk === undefined) throw { tag: 'closed' };
    return chunk;
  }
  blockingRead(len: bigint): Uint8Array {
    return this.read(len);
  }
  skip(len: bigint): bigint {
    return BigInt(this.read(len).length);
  }
  blockingSkip(len: bigint): bigint {
    return this.skip(len);
  }
  subscribe(): Pollable {
    return new Pollable();
  }
}

export class OutputStream {
  constructor(readonly sink: ByteSink) {}
  checkWrite(): bigint {
    return BigInt(CHUNK);
  }
  write(buf: Uint8Array): void {
    this.sink.write(buf);
  }
  blockingWriteAndFlush(buf: Uint8Array): void {
    this.sink.write(buf);
  }
  flush(): void {}
  blockingFlush(): void {}
  writeZeroes(len: bigint): void {
    this.sink.write(new Uint8Array(Number(len)));
  }
  blockingWriteZeroesAndFlush(len: bigint): void {
    this.writeZeroes(len);
  }
  subscribe(): Pollable {
    return new Pollable();
  }
}

/** A source over bytes in memory (stdin of a component: empty). */
export function memorySource(data: Uint8Array): ByteSource {
  let pos = 0;
  return {
    read(len: number): Uint8Array | undefined {
      if (pos >= data.length) return undefined;
      const chunk = data.slice(pos, pos + len);
      pos += chunk.length;
      return chunk;
    },
  };
}

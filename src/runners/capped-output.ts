/**
 * Collects a stream's bytes up to a cap. Past the cap it keeps nothing more and reports the
 * overflow once, so a flood costs bounded memory whatever the producer does.
 */
export class CappedOutput {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private overflowed = false;

  constructor(
    readonly limit: number,
    private readonly onOverflow: () => void,
  ) {}

  push(chunk: Buffer | string): void {
    if (this.overflowed) return;
    const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    const room = this.limit - this.size;
    if (buf.length > room) {
      if (room > 0) this.chunks.push(Buffer.from(buf.subarray(0, room)));
      this.size = this.limit;
      this.overflowed = true;
      this.onOverflow();
      return;
    }
    // Copy what is kept: the chunk may be a slice of a large, shared buffer that must not stay pinned.
    this.chunks.push(Buffer.from(buf));
    this.size += buf.length;
  }

  get truncated(): boolean {
    return this.overflowed;
  }

  get bytes(): number {
    return this.size;
  }

  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

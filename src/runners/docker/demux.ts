/**
 * Splits the Engine API's multiplexed attach stream (8-byte header: stream type, 3 zero bytes,
 * big-endian payload length) into stdout and stderr, keeping at most `capBytes` of each.
 * Past the cap the rest is dropped and `onOverflow` fires once, so the caller can kill the container
 * while memory stays bounded however much the container writes.
 */
export class OutputDemuxer {
  private readonly capBytes: number;
  private readonly onOverflow: () => void;
  private pending: Buffer = Buffer.alloc(0);
  private readonly out: Buffer[] = [];
  private readonly err: Buffer[] = [];
  private outBytes = 0;
  private errBytes = 0;
  private overflowed = false;

  constructor(capBytes: number, onOverflow: () => void) {
    this.capBytes = capBytes;
    this.onOverflow = onOverflow;
  }

  get truncated(): boolean {
    return this.overflowed;
  }

  push(chunk: Buffer): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 8) {
      const type = this.pending[0];
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) {
        // Do not buffer a huge frame we are going to drop anyway: consume what is there.
        if (this.overflowed || this.wouldOverflow(type, this.pending.length - 8)) {
          this.take(type, this.pending.subarray(8));
          this.pending = Buffer.concat([
            this.pending.subarray(0, 4),
            uint32(size - (this.pending.length - 8)),
          ]);
        }
        return;
      }
      this.take(type, this.pending.subarray(8, 8 + size));
      this.pending = this.pending.subarray(8 + size);
    }
  }

  stdout(): string {
    return Buffer.concat(this.out).toString('utf8');
  }

  stderr(): string {
    return Buffer.concat(this.err).toString('utf8');
  }

  private wouldOverflow(type: number | undefined, extra: number): boolean {
    return (type === 2 ? this.errBytes : this.outBytes) + extra > this.capBytes;
  }

  private take(type: number | undefined, payload: Buffer): void {
    if (payload.length === 0) return;
    // 1 = stdout, 2 = stderr; 0 (stdin echo) does not occur without a TTY and counts as stdout.
    const isErr = type === 2;
    const used = isErr ? this.errBytes : this.outBytes;
    const room = Math.max(0, this.capBytes - used);
    const kept = payload.length <= room ? payload : payload.subarray(0, room);
    if (kept.length > 0) {
      // Copy: the chunk buffer may be large and shared; keep only what we keep.
      (isErr ? this.err : this.out).push(Buffer.from(kept));
      if (isErr) this.errBytes += kept.length;
      else this.outBytes += kept.length;
    }
    if (kept.length < payload.length && !this.overflowed) {
      this.overflowed = true;
      this.onOverflow();
    }
  }
}

function uint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

import { CappedOutput } from '../capped-output.js';

/**
 * Splits the Engine API's multiplexed attach stream (8-byte header: stream type, 3 zero bytes,
 * big-endian payload length) into stdout and stderr, keeping at most `capBytes` of each.
 * Past the cap the rest is dropped and `onOverflow` fires once, so the caller can kill the container
 * while memory stays bounded however much the container writes.
 */
export class OutputDemuxer {
  private pending: Buffer = Buffer.alloc(0);
  private readonly out: CappedOutput;
  private readonly err: CappedOutput;
  private overflowed = false;

  constructor(capBytes: number, onOverflow: () => void) {
    // Either stream passing the cap ends the call: report the first overflow only.
    const once = (): void => {
      if (this.overflowed) return;
      this.overflowed = true;
      onOverflow();
    };
    this.out = new CappedOutput(capBytes, once);
    this.err = new CappedOutput(capBytes, once);
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
    return this.out.text();
  }

  stderr(): string {
    return this.err.text();
  }

  /** 1 = stdout, 2 = stderr; 0 (stdin echo) does not occur without a TTY and counts as stdout. */
  private target(type: number | undefined): CappedOutput {
    return type === 2 ? this.err : this.out;
  }

  private wouldOverflow(type: number | undefined, extra: number): boolean {
    return this.target(type).bytes + extra > this.target(type).limit;
  }

  private take(type: number | undefined, payload: Buffer): void {
    if (payload.length > 0) this.target(type).push(payload);
  }
}

function uint32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

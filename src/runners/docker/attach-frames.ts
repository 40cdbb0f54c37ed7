/** One multiplexed frame of the Engine API's attach stream (see demux.ts). */
export function frame(type: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(8);
  header[0] = type;
  header.writeUInt32BE(payload.length, 4);
  return Buffer.concat([header, payload]);
}

/** Splits the attach stream into whole frames, so each can go to whoever reads the container now. */
export class FrameSplitter {
  private pending: Buffer = Buffer.alloc(0);

  push(chunk: Buffer, emit: (type: number, payload: Buffer) => void): void {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) return;
      emit(this.pending[0] ?? 1, this.pending.subarray(8, 8 + size));
      this.pending = this.pending.subarray(8 + size);
    }
  }
}

/**
 * An audit sink that keeps events in memory, for tests and benchmarks.
 */
import type { AuditEvent, AuditSink } from './record.js';

/** For tests and benchmarks: keeps events in memory. */
export class MemoryAuditSink implements AuditSink {
  readonly events: AuditEvent[] = [];
  append(event: AuditEvent): Promise<void> {
    this.events.push(event);
    return Promise.resolve();
  }
}

// What a user preloads with `node --import` to export capsule's spans (docs/telemetry.md), with an
// exporter that appends each finished span as one JSON line to $CAPSULE_TEST_SPANS.
import { appendFileSync } from 'node:fs';
import { trace } from '@opentelemetry/api';
import { BasicTracerProvider, BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';

const file = process.env.CAPSULE_TEST_SPANS;
const exporter = {
  export(spans, done) {
    for (const s of spans)
      appendFileSync(
        file,
        `${JSON.stringify({ name: s.name, attributes: s.attributes, status: s.status })}\n`,
      );
    done({ code: 0 });
  },
  shutdown: () => Promise.resolve(),
};
// Batched with a delay no command outlives: a span reaches the file only through capsule's flush.
const batch = new BatchSpanProcessor(exporter, { scheduledDelayMillis: 600_000 });
trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [batch] }));

// Part of `npm run build` (after tsc): compiles the draft-07 meta-schema input schemas are checked
// against into dist/manifest/input-meta.cjs, with Ajv's standalone code generator and the options
// src/manifest/input.ts compiles with, so a command that reads a manifest does not compile it at start-up.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv } from 'ajv';
import standaloneCode from 'ajv/dist/standalone/index.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const { INPUT_AJV_OPTIONS, DRAFT_07_META } = await import(path.join(root, 'dist/manifest/input.js'));
const ajv = new Ajv({ ...INPUT_AJV_OPTIONS, code: { source: true } });
const validate = ajv.getSchema(DRAFT_07_META);
if (validate === undefined) throw new Error(`Ajv has no ${DRAFT_07_META} meta-schema`);
const generate = standaloneCode.default ?? standaloneCode;
writeFileSync(path.join(root, 'dist/manifest/input-meta.cjs'), generate(ajv, validate));

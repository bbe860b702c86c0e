/** Writes docs/openapi.json from the schemas (`npm run openapi`). */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../stack/paths.js';
import { openApiText } from './openapi.js';

const file = join(REPO_ROOT, 'docs', 'openapi.json');
writeFileSync(file, openApiText());
process.stdout.write(`wrote ${file}\n`);

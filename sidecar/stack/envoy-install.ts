import { installEnvoy, envoyVersion, BUNDLED_ENVOY } from './envoy-bin.js';
import { existsSync } from 'node:fs';

const bin = existsSync(BUNDLED_ENVOY) ? BUNDLED_ENVOY : installEnvoy();
process.stdout.write(`envoy ${envoyVersion(bin)} at ${bin}\n`);

/**
 * `npm run faults`: the fault suite in its long mode (FAULTS_MODE=short for
 * the quick one that also runs inside `npm test`). Loopback only; prints one
 * line per scenario and `N passed, N failed`; exits 1 on any failure.
 * FAULTS_ONLY=<substring> runs the scenarios whose name contains it.
 */
import { LONG, SHORT, runFaultSuite } from './suite.js';

const mode = process.env.FAULTS_MODE === 'short' ? SHORT : LONG;
const only = process.env.FAULTS_ONLY;
const results = await runFaultSuite(mode, (line) => process.stdout.write(`${line}\n`), only ? (s) => s.name.includes(only) : undefined);
process.exit(results.every((r) => r.passed) ? 0 : 1);

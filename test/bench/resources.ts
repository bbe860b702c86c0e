// Resource measurement for the Kubernetes requests and limits:
//   npx tsx test/bench/resources.ts        (RESOURCES_SECONDS, RESOURCES_CONNECTIONS tune it)
// Starts one gateway (Redis store, credit check on) on free ports, drives
// non-streaming chat with autocannon, then a streaming phase, and samples every
// process's resident memory (VmRSS, /proc/PID/status) and CPU (utime+stime,
// /proc/PID/stat) each 200 ms. Prints peak RSS and CPU cores used per process.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import autocannon from 'autocannon';
import { startGateway } from '../harness/gateway.js';

const SECONDS = Number(process.env.RESOURCES_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.RESOURCES_CONNECTIONS ?? 10);
const TICK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICK;
};

async function phase(name: string, run: () => Promise<unknown>, pids: Record<string, number>) {
  const peak: Record<string, number> = {};
  const cpu0 = Object.fromEntries(Object.entries(pids).map(([n, p]) => [n, cpuMs(p)]));
  const t0 = Date.now();
  const timer = setInterval(() => {
    for (const [n, p] of Object.entries(pids)) peak[n] = Math.max(peak[n] ?? 0, rssMb(p));
  }, 200);
  await run();
  clearInterval(timer);
  const secs = (Date.now() - t0) / 1000;
  for (const [n, p] of Object.entries(pids)) {
    const cores = (cpuMs(p) - (cpu0[n] as number)) / 1000 / secs;
    process.stdout.write(`${name}\t${n}\tpeak RSS ${peak[n]?.toFixed(0)} MB\tCPU ${cores.toFixed(2)} cores\n`);
  }
}

const gw = await startGateway({ store: 'redis', config: { billing: { creditCheck: true } } });
try {
  await gw.admin.adjustCredits(gw.tenantId, 10_000_000_000, 'bench', 'bench credit');
  const pids = Object.fromEntries(['sidecar', 'envoy'].map((n) => [n, gw.stack.process(n).pid as number]));
  const base = { url: `${gw.base}/chat/completions`, method: 'POST' as const, connections: CONNECTIONS, duration: SECONDS, headers: { 'content-type': 'application/json', 'x-api-key': gw.key } };
  process.stdout.write(`idle\tsidecar ${rssMb(pids.sidecar!).toFixed(0)} MB\tenvoy ${rssMb(pids.envoy!).toFixed(0)} MB\n`);
  await phase('chat', async () => {
    const r = await autocannon({ ...base, body: JSON.stringify({ model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'hello #sim:delay=0 #sim:tokens=20' }] }) });
    process.stdout.write(`chat\t${r.requests.average.toFixed(0)} req/s, ${r.non2xx} non-2xx\n`);
  }, pids);
  await phase('stream', async () => {
    const r = await autocannon({ ...base, connections: CONNECTIONS * 5, body: JSON.stringify({ model: 'svc-core', stream: true, max_tokens: 40, messages: [{ role: 'user', content: 'hello #sim:chunk-delay=20 #sim:tokens=40' }] }) });
    process.stdout.write(`stream\t${r.requests.average.toFixed(0)} streams/s, ${r.non2xx} non-2xx\n`);
  }, pids);
} finally {
  await gw.stop();
}

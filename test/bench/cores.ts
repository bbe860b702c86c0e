/**
 * How JSON chat throughput scales with sidecar processes (issue 11, "Cores"):
 * one full gateway per process count (Redis store, credit check on, as the
 * integration tests start it), measured in interleaved rounds so a busy
 * neighbour on a shared box hits every count alike.
 *
 *   npx tsx test/bench/cores.ts
 *
 *   CORES_SIDECARS      process counts, comma-separated (default 1,2)
 *   CORES_SECONDS       measured autocannon run per count and round (default 5)
 *   CORES_ROUNDS        rounds (default 3)
 *   CORES_CONNECTIONS   connections (default 16)
 *
 * Per count: requests/s per round (median, min-max), sidecar CPU per request
 * (all its processes together, from /proc), each process's share of the CPU,
 * Envoy's and the simulator's CPU per request, and how busy the whole box was
 * (/proc/stat: what limits scaling here). Every answer must be a 200. The last
 * stdout line is `CORES_JSON {...}`.
 */
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import autocannon from 'autocannon';
import { startGateway, type TestGateway } from '../harness/gateway.js';
import { procCpuMs } from './proc.js';
import { chatBody } from './scenarios.js';

const envInt = (name: string, dflt: number) => {
  const v = Number(process.env[name]);
  return Number.isInteger(v) && v > 0 ? v : dflt;
};
const counts = (process.env.CORES_SIDECARS ?? '1,2').split(',').map((s) => Number(s.trim()));
const seconds = envInt('CORES_SECONDS', 5);
const rounds = envInt('CORES_ROUNDS', 3);
const connections = envInt('CORES_CONNECTIONS', 16);
/** 1,000,000 CHF in micro-units: the credit check never refuses during the run. */
const GRANT = 1_000_000_000_000;

/** Busy and total jiffies of all cores (/proc/stat's first line). */
function boxJiffies(): { busy: number; total: number } {
  const f = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((s, x) => s + x, 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0); // idle + iowait
  return { busy: total - idle, total };
}

interface Round {
  rps: number;
  total: number;
  non2xx: number;
  errors: number;
  /** CPU ms by process name over the measured run. */
  cpuMs: Record<string, number>;
  /** Fraction of all cores busy during the run (every process on the box). */
  boxBusy: number;
}

function pidsOf(gw: TestGateway): Record<string, number | undefined> {
  const out: Record<string, number | undefined> = {};
  for (const p of gw.stack.processes) out[p.name] = p.pid;
  return out;
}

async function measure(gw: TestGateway): Promise<Round> {
  const opts = {
    url: `${gw.base}/chat/completions`,
    method: 'POST' as const,
    headers: { 'content-type': 'application/json', 'x-api-key': gw.key },
    body: chatBody('svc-quick'),
    connections,
  };
  await autocannon({ ...opts, duration: 1 }); // warm-up
  const pids = pidsOf(gw);
  const before = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, procCpuMs(pid)]));
  const box0 = boxJiffies();
  const r = await autocannon({ ...opts, duration: seconds });
  const box1 = boxJiffies();
  const cpuMs = Object.fromEntries(Object.entries(pids).map(([n, pid]) => [n, procCpuMs(pid) - (before[n] ?? NaN)]));
  return {
    rps: r.requests.total / r.duration,
    total: r.requests.total,
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    cpuMs,
    boxBusy: (box1.busy - box0.busy) / Math.max(1, box1.total - box0.total),
  };
}

const median = (xs: readonly number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};
const f1 = (x: number) => x.toFixed(1);
const f3 = (x: number) => x.toFixed(3);

async function main() {
  const gws: Array<{ n: number; gw: TestGateway }> = [];
  const stop = async () => {
    for (const { gw } of gws) await gw.stop().catch(() => undefined);
  };
  process.once('SIGINT', () => void stop().then(() => process.exit(130)));
  try {
    for (const n of counts) {
      const gw = await startGateway({ store: 'redis', sidecars: n, config: { billing: { creditCheck: true }, log: { level: 'warn' } } });
      gws.push({ n, gw });
      await gw.admin.adjustCredits(gw.tenantId, GRANT, 'cores-bench', 'bench');
    }
    const results = new Map<number, Round[]>(counts.map((n) => [n, []]));
    for (let r = 0; r < rounds; r++) {
      for (const { n, gw } of gws) {
        const m = await measure(gw);
        results.get(n)?.push(m);
        process.stderr.write(`round ${r + 1}/${rounds}, ${n} sidecar(s): ${f1(m.rps)} req/s, box ${Math.round(m.boxBusy * 100)}% busy\n`);
      }
    }

    const summary = counts.map((n) => {
      const rs = results.get(n) ?? [];
      const total = rs.reduce((s, x) => s + x.total, 0);
      const sum = (pick: (name: string) => boolean) => rs.reduce((s, x) => s + Object.entries(x.cpuMs).filter(([k]) => pick(k)).reduce((a, [, v]) => a + v, 0), 0);
      const isSidecar = (k: string) => k === 'sidecar' || k.startsWith('sidecar-');
      const names = Object.keys(rs[0]?.cpuMs ?? {}).filter(isSidecar);
      const sidecarMs = sum(isSidecar);
      return {
        sidecars: n,
        rps: rs.map((x) => Math.round(x.rps)),
        rpsMedian: median(rs.map((x) => x.rps)),
        non2xx: rs.reduce((s, x) => s + x.non2xx + x.errors, 0),
        sidecarCpuMsPerReq: sidecarMs / total,
        sidecarShares: names.map((k) => sum((x) => x === k) / sidecarMs),
        envoyCpuMsPerReq: sum((k) => k === 'envoy') / total,
        simulatorCpuMsPerReq: sum((k) => k === 'simulator') / total,
        boxBusy: median(rs.map((x) => x.boxBusy)),
      };
    });
    const base = summary[0]?.rpsMedian ?? NaN;
    const lines = [
      `JSON chat, ${connections} connections, Redis + credit check, ${rounds} interleaved rounds x ${seconds} s per count; ${cpus().length} cores on this box`,
      'sidecars | req/s median | per round         | x vs first | sidecar CPU ms/req | split between processes | Envoy ms/req | simulator ms/req | box busy',
      ...summary.map((s) =>
        [
          String(s.sidecars).padStart(8),
          f1(s.rpsMedian).padStart(12),
          s.rps.join(', ').padEnd(17),
          (s.rpsMedian / base).toFixed(2).padStart(10),
          f3(s.sidecarCpuMsPerReq).padStart(18),
          s.sidecarShares.map((x) => `${Math.round(x * 100)}%`).join(' / ').padEnd(23),
          f3(s.envoyCpuMsPerReq).padStart(12),
          f3(s.simulatorCpuMsPerReq).padStart(16),
          `${Math.round(s.boxBusy * 100)}%`.padStart(8),
        ].join(' | '),
      ),
    ];
    process.stdout.write(`${lines.join('\n')}\n`);
    const bad = summary.filter((s) => s.non2xx > 0);
    if (bad.length) process.stdout.write(`WARNING: answers other than 200: ${bad.map((s) => `${s.sidecars} sidecar(s): ${s.non2xx}`).join(', ')}\n`);
    process.stdout.write(`CORES_JSON ${JSON.stringify({ connections, seconds, rounds, cores: cpus().length, summary })}\n`);
  } finally {
    await stop();
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});

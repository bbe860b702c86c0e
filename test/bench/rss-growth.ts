// Sidecar memory against request count (issue 11 target 6): starts one gateway
// as the bench's `credit` target (Redis store, credit check on; RSS_STORE=memory:
// the embedded store, whose history lives in the sidecar's heap), then sends
// ROUNDS rounds of REQUESTS JSON chats at CONNECTIONS connections and prints,
// after each round, the sidecar's RSS (/proc) and V8 heap (operator /metrics).
// A leak grows round after round; a plateau does not.
//   npx tsx test/bench/rss-growth.ts
//   RSS_ROUNDS=6 RSS_REQUESTS=3000 RSS_CONNECTIONS=16 RSS_STORE=redis|memory SIDECAR_NODE_ARGS='--max-semi-space-size=4'
// SIDECAR_NODE_ARGS come after the sidecar's own heap flags (sidecar/stack/node-flags.ts)
// and override them; V8's defaults: SIDECAR_NODE_ARGS='--max-semi-space-size=0 --max-old-space-size=0'.
import { readFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import autocannon from 'autocannon';
import { startGateway } from '../harness/gateway.js';

const ROUNDS = Number(process.env.RSS_ROUNDS ?? 6);
const REQUESTS = Number(process.env.RSS_REQUESTS ?? 3000);
const CONNECTIONS = Number(process.env.RSS_CONNECTIONS ?? 16);
const NODE_ARGS = (process.env.SIDECAR_NODE_ARGS ?? '').split(' ').filter(Boolean);
const STORE = process.env.RSS_STORE === 'memory' ? 'memory' : 'redis';
const TICK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

const status = (pid: number, field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) / 1024;
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICK;
};

const gw = await startGateway({ store: STORE, config: { billing: { creditCheck: true } }, ...(NODE_ARGS.length ? { nodeArgs: { sidecar: NODE_ARGS } } : {}) });
try {
  await gw.admin.adjustCredits(gw.tenantId, 1_000_000_000_000, 'bench-grant', 'bench');
  const pid = gw.stack.process('sidecar').pid as number;
  const heap = async () => {
    const text = await (await fetch(`${gw.stack.adminUrl}/metrics`, { headers: { authorization: `Bearer ${gw.stack.adminToken}` } })).text();
    const val = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN) / 1048576;
    return {
      used: val(/^\w*nodejs_heap_size_used_bytes (\S+)/m),
      total: val(/^\w*nodejs_heap_size_total_bytes (\S+)/m),
      external: val(/^\w*nodejs_external_memory_bytes (\S+)/m),
      newSpace: val(/^\w*nodejs_heap_space_size_total_bytes\{space="new"\} (\S+)/m),
      oldUsed: val(/^\w*nodejs_heap_space_size_used_bytes\{space="old"\} (\S+)/m),
      gcMs: [...text.matchAll(/^\w*nodejs_gc_duration_seconds_sum\{kind="(\w+)"\} (\S+)/gm)].reduce((a, m) => a + Number(m[2]) * 1000, 0),
    };
  };
  let gc0 = 0;
  const line = async (label: string, peak: number, cpu: string) => {
    const h = await heap();
    if (cpu) cpu += `, GC ${((h.gcMs - gc0) / REQUESTS).toFixed(3)} ms/req`;
    gc0 = h.gcMs;
    process.stdout.write(`${label}\tRSS ${status(pid, 'VmRSS').toFixed(0)} MiB (anon ${status(pid, 'RssAnon').toFixed(0)}, file ${status(pid, 'RssFile').toFixed(0)}, peak ${peak.toFixed(0)})\theap used ${h.used.toFixed(1)} / total ${h.total.toFixed(1)} MiB\tnew ${h.newSpace.toFixed(1)}\told used ${h.oldUsed.toFixed(1)}\text ${h.external.toFixed(1)}\t${cpu}\n`);
  };
  process.stdout.write(`store ${STORE}; sidecar node args: ${NODE_ARGS.join(' ') || '(none)'}; ${ROUNDS} x ${REQUESTS} requests at c=${CONNECTIONS}\n`);
  await line('idle', status(pid, 'VmRSS'), '');
  const body = JSON.stringify({ model: 'svc-quick', max_tokens: 20, messages: [{ role: 'user', content: 'hello #sim:delay=0 #sim:tokens=20' }] });
  let peak = 0;
  for (let i = 1; i <= ROUNDS; i++) {
    const cpu0 = cpuMs(pid);
    const timer = setInterval(() => (peak = Math.max(peak, status(pid, 'VmRSS'))), 100);
    const r = await autocannon({ url: `${gw.base}/chat/completions`, method: 'POST', connections: CONNECTIONS, amount: REQUESTS, headers: { 'content-type': 'application/json', 'x-api-key': gw.key }, body });
    clearInterval(timer);
    const cpuPerReq = (cpuMs(pid) - cpu0) / REQUESTS;
    await line(`round ${i} (${i * REQUESTS})`, peak, `cpu ${cpuPerReq.toFixed(3)} ms/req, ${r.non2xx} non-2xx`);
  }
  await new Promise((r) => setTimeout(r, 3000));
  await line('idle 3s', peak, '');
} finally {
  await gw.stop();
}

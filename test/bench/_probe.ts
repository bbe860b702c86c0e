import autocannon from 'autocannon';
import { startTargets, stopTargets } from './targets.js';
const t = await startTargets();
try {
  const body = JSON.stringify({ model: 'svc-core', messages: [{ role: 'user', content: 'hi' }] });
  for (let i = 0; i < 3; i++) {
    const r = await autocannon({ url: `${t.gatewayBase}/chat/completions`, method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': t.gatewayKey }, body, connections: 10, duration: 4 });
    console.log('non2xx', r.non2xx, '5xx', r['5xx'], 'total', r.requests.total);
  }
  console.log([...t.accessLogProblems()]);
  const st = await (await fetch(`${t.gateway.stack.envoyAdminUrl}/stats?filter=ext_authz|cluster.sidecar.(upstream_cx|upstream_rq|http2)`)).text();
  console.log(st.split('\n').filter((l) => !/: 0$/.test(l)).join('\n'));
  console.log('SIDECAR', t.gateway.stack.process('sidecar').lines.filter((l) => /error|warn|"level":[45]/i.test(l)).slice(-10).join('\n'));
  const side = t.gateway.stack.process('sidecar').lines.filter((l) => !l.includes('"status":200'));
  console.log(side.slice(-30).join('\n'));
  const env = t.gateway.stack.process('envoy').lines.filter((l) => !l.startsWith('{'));
  console.log(env.slice(-20).join('\n'));
  const bad = t.gateway.stack.process('envoy').lines.filter((l) => l.includes('ext_authz_error'));
  console.log(bad.slice(-5).join('\n'));
} finally {
  await stopTargets();
}

import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { dirname } from 'node:path';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { loadConfig, loadConfigOrExit, readUpstreamKey } from './config/load.js';
import type { Principal } from './domain/auth/principal.js';
import type { Config } from './config/schema.js';
import { Authorizer } from './domain/auth/authorize.js';
import { SessionVerifier } from './domain/auth/sessions.js';
import { KeyCache } from './domain/auth/key-cache.js';
import { createBroadcast, createKeyEvents } from './store/key-events.js';
import type { ExchangeSummary } from './domain/exchange.js';
import { createAuthorizationService } from './adapters/envoy/authz-service.js';
import { createExternalProcessorService, LiveExchanges } from './adapters/envoy/ext-proc-service.js';
import { Lifecycle } from './domain/lifecycle.js';
import { startGrpcServer } from './adapters/grpc-server.js';
import { buildAdminServer } from './adapters/admin/server.js';
import { closeLogger, createLogger } from './adapters/logger.js';
import { createAccountStore, createLedger, createStore } from './store/create.js';
import { createAutoTopupTrigger } from './store/auto-topup-trigger.js';
import { buildAccountService } from '../account/server.js';
import { AutoTopupRunner } from '../account/auto-topup.js';
import { paymentsFromConfig } from '../account/payments/from-config.js';
import { Billing } from './domain/billing/service.js';
import { SettlementJournal } from './domain/billing/journal.js';
import { LEASE_RECALL_TOPIC, type Recall } from './domain/billing/lease-recall.js';
import { Gate } from './domain/gate.js';
import { AdmissionCache } from './domain/admission-cache.js';
import { usageReport } from './domain/billing/usage-report.js';
import { API_PREFIX } from './api-prefix.js';
import { jsonFetcher } from './adapters/outbound-tls.js';
import { GatewayMetrics, routeLabel, type BuildInfo } from './adapters/metrics.js';
import { timedStore } from './adapters/timed-store.js';
import { LiveConfig } from './domain/live-config.js';
import { ConfigReloader } from './adapters/config-reloader.js';
import { settingsHash } from './config/reload.js';

/** Version from package.json; commit from GATEWAY_BUILD_COMMIT (set by the image build), else "unknown". */
function buildInfo(env: NodeJS.ProcessEnv): BuildInfo {
  let version = 'unknown';
  try {
    version = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string }).version ?? version;
  } catch {
    // not packaged with its package.json
  }
  return { version, commit: env.GATEWAY_BUILD_COMMIT || 'unknown' };
}
import { checkProvider } from './adapters/provider-check.js';

/** Admin token: ADMIN_TOKEN, else the file at ADMIN_TOKEN_FILE (created with a fresh token if missing). */
function adminToken(env: NodeJS.ProcessEnv): string {
  if (env.ADMIN_TOKEN) return env.ADMIN_TOKEN;
  const file = env.ADMIN_TOKEN_FILE ?? '.run/admin-token';
  if (existsSync(file)) return readFileSync(file, 'utf8').trim();
  const token = randomBytes(24).toString('base64url');
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${token}\n`, { mode: 0o600 });
  return token;
}


export async function startSidecar(cfg: Config, env: NodeJS.ProcessEnv = process.env) {
  const log = createLogger(cfg.log.level, `${cfg.brand}-sidecar`);
  const metrics = new GatewayMetrics(buildInfo(env));
  const store = timedStore(createStore(cfg), (sec, ok, down) => metrics.storeOperation('keys', sec, ok, down));
  // The reloadable settings new requests are served with (alias assignments, prices, limits).
  const settings = new LiveConfig(cfg);
  const sessions = new SessionVerifier({ ...cfg.identity, fetchJson: jsonFetcher(cfg.identity.jwksUrl, cfg.identity.tls, 'identity.tls') }, (ok) => metrics.identityRefresh(ok));
  const keyCache = new KeyCache(cfg.auth.keyCacheSeconds * 1000);
  const broadcast = createBroadcast(cfg);
  const keyEvents = createKeyEvents(cfg, broadcast);
  keyEvents.subscribe((hash) => (hash === null ? keyCache.clear() : keyCache.invalidate(hash)));
  const authorizer = new Authorizer({
    brand: cfg.brand,
    findKey: (h) => keyCache.get(h, (x) => store.getKeyByHash(x)),
    verifySession: (t) => sessions.verify(t),
  });
  const upstreamKey = readUpstreamKey(cfg, env);
  const ledger = timedStore(createLedger(cfg), (sec, ok, down) => metrics.storeOperation('ledger', sec, ok, down));
  // This process, recorded with every hold it places or claims (operators see whose holds a reaper released).
  const instance = `${hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`;
  const journal = new SettlementJournal(cfg.billing.journalPath);
  // Settlements a previous life recorded but never wrote to the ledger (it died between an
  // answer and its settlement): retried with the journal from now on.
  const adopted = journal.adoptIntents();
  if (adopted.adopted || adopted.unreadable) {
    log.warn({ settlements: adopted.adopted, unreadable: adopted.unreadable }, 'settlements the previous run recorded and may not have written: journaled again (those it wrote change nothing)');
  }
  const billing = new Billing(
    ledger,
    cfg.billing,
    journal,
    {
      settled: (i) => {
        if (i.uncovered > 0) log.warn({ request_id: i.requestId, charged: i.charged, uncovered: i.uncovered }, 'charge above the hold');
      },
      failed: (what, err) =>
        log.warn(
          { op: what, err: (err as Error).name },
          what === 'lease'
            ? 'credit lease operation failed; the lease admits no more and is given back'
            : what === 'recall'
              ? "credit lease recall failed; the request's refusal stands"
              : 'ledger write failed; journaled for retry',
        ),
      holdOpened: (amount) => metrics.holdOpened(amount),
      admitted: (via) => metrics.admitted(via),
      unclaimedReleased: (amount) => metrics.holdClosed(amount),
      operation: (op, result) => metrics.settlement(op, result),
    },
    Date.now,
    instance,
    // A direct hold refused while other instances lease the tenant's credit asks them for it back.
    { recall: (tenantId) => broadcast.publish(LEASE_RECALL_TOPIC, tenantId) },
  );
  billing.reconfigure(cfg.billing, settings.current.catalog.all());
  metrics.watchLeased(() => billing.leased);
  broadcast.subscribe(LEASE_RECALL_TOPIC, (tenantId) => {
    if (tenantId) void billing.recallReceived(tenantId);
  });
  const lifecycle = new Lifecycle();
  const live = new LiveExchanges();
  const admissions = new AdmissionCache();
  const gate = new Gate(authorizer, billing, () => settings.current.admission, API_PREFIX, cfg.limits.maxRequestHeaders, admissions, {
    billingEnabled: cfg.accountService.billingEnabled,
  });
  const accounts = createAccountStore(cfg);
  const trigger = createAutoTopupTrigger(cfg, ledger);
  const payments = paymentsFromConfig(cfg);
  const autoTopup = new AutoTopupRunner({ ledger, accounts, trigger, payments, currency: cfg.billing.currency, log });
  const revoked = async (hash: string) => {
    keyCache.invalidate(hash);
    await keyEvents.publish(hash).catch(() => log.warn('revocation not broadcast; other instances drop the key when its cache entry expires'));
  };

  // Holds another process placed and this one's response processing claimed: they count in
  // that process's hold gauges (opened there, closed there after the claim grace period).
  const takenOver = new Set<string>();
  /** An exchange's log line and metrics: written after its last answer has left (see onSummary). */
  const record = (s: ExchangeSummary) => {
    metrics.exchange(s);
    if (s.held !== null && !takenOver.delete(s.requestId)) metrics.holdClosed(s.held);
    log.info(
      {
        request_id: s.requestId,
        method: s.method,
        path: s.path,
        status: s.status,
        upstream_status: s.upstreamStatus ?? undefined,
        outcome: s.outcome,
        code: s.errorCode,
        tenant_id: s.principal?.tenantId,
        key_id: s.principal?.keyId,
        alias: s.alias,
        stream: s.stream,
        request_count: s.requestCount || undefined,
        prompt_tokens: s.usage?.promptTokens,
        completion_tokens: s.usage?.completionTokens,
        usage_estimated: s.usage?.estimated,
      },
      'request',
    );
  };
  const unrecorded: ExchangeSummary[] = [];
  const recordAll = () => {
    for (const s of unrecorded.splice(0)) {
      try {
        record(s);
      } catch (err) {
        // Outside any gRPC call now: a throw here would end the process.
        metrics.error('ext_proc');
        log.error({ request_id: s.requestId, err: (err as Error).name }, 'exchange record failed');
      }
    }
  };
  const onSummary = (s: ExchangeSummary) => {
    if (!s.requestId) return; // a reply of an earlier filter, already logged by ext_authz
    // The settlement is recorded now, in the tick that handed the last answer to gRPC and
    // before that answer leaves (HTTP/2 frames go out from a native immediate after this
    // tick), and written to the store one turn later, once the answer has left: a crash in
    // between leaves the record, which the next start retries (Billing.finish).
    if (s.held !== null && s.principal) {
      const tenantId = s.principal.tenantId;
      billing
        .finish({ principal: s.principal, ctx: s.ctx, requestId: s.requestId, usage: s.billable, startedAt: s.startedAt })
        // Auto top-up: this settlement may have taken the available balance below the workspace's threshold.
        .then(() => (cfg.accountService.billingEnabled ? autoTopup.afterSettlement(tenantId) : undefined))
        .catch((err: unknown) => {
          metrics.error('settlement');
          log.error({ request_id: s.requestId, err: (err as Error).name }, 'settlement failed');
        });
    }
    // The log line and metrics wait one turn of the event loop, after the answer has left
    // (they cost about 0.1 ms that the caller would otherwise wait for); a stop writes any
    // still waiting before it closes the log. A kill -9 in between loses the line, as it
    // loses the buffered lines anyway; never the settlement.
    unrecorded.push(s);
    if (unrecorded.length === 1) setImmediate(recordAll);
  };

  // Rebuilt when a reload is applied; each exchange reads it once when it starts.
  const exchangeDepsOf = (snap: typeof settings.current) => ({
    brand: cfg.brand,
    apiPrefix: API_PREFIX,
    catalog: snap.catalog,
    admission: snap.admission,
    admissions,
    maxResponseBytes: cfg.limits.maxResponseBytes,
    identityProvider: () => ({ ...sessions.status() }),
    usage: (principal: Principal, query: string, requestId: string) => usageReport(ledger, snap.config.billing, cfg.brand, principal, query, requestId),
  });
  let exchangeDeps = exchangeDepsOf(settings.current);
  const reloader = new ConfigReloader({
    live: settings,
    log,
    broadcast,
    configPath: env.GATEWAY_CONFIG,
    load: () => loadConfig({ env }),
    applied: (snap) => {
      billing.reconfigure(snap.config.billing, snap.catalog.all());
      exchangeDeps = exchangeDepsOf(snap);
      log.level = snap.config.log.level;
    },
    observe: (applied, generation, hash) => metrics.reload(applied, generation, hash),
  });
  metrics.settings(0, settingsHash(cfg));

  const grpc = await startGrpcServer(cfg.listen.sidecarGrpc, {
    authz: createAuthorizationService({
      gate,
      brand: cfg.brand,
      upstreamKey,
      log,
      lifecycle,
      observe: (ms, path, refused) => {
        metrics.observe('authorization', ms);
        if (refused) metrics.refused(routeLabel(path, API_PREFIX), refused.status, refused.code);
      },
      onFailure: () => metrics.error('authorization'),
      abandoned: (requestId) => void billing.releaseAbandoned(requestId),
    }),
    extProc: createExternalProcessorService({
      log,
      live,
      onSummary,
      onFailure: () => metrics.error('ext_proc'),
      claim: ({ tenantId, requestId, leased, lease }) => {
        if (!billing.claim(tenantId, requestId, leased, lease)) takenOver.add(requestId);
        return billing.confirmation(requestId);
      },
      // Ends a silent stream with an error event a second before Envoy's idle timeout would cut it.
      streamStallMs: Math.max(1000, cfg.upstream.idleTimeoutMs - 1000),
      exchange: () => exchangeDeps,
    }),
  });
  // A deduct never takes leased credit and a new cap applies at once: the leases come back first (this instance's at once).
  const recallLeases: Recall = async (tenantId) => {
    await Promise.all([billing.recallReceived(tenantId), broadcast.publish(LEASE_RECALL_TOPIC, tenantId)]);
  };
  const admin = buildAdminServer({
    store,
    ledger,
    brand: cfg.brand,
    currency: cfg.billing.currency,
    adminToken: adminToken(env),
    log,
    accepting: () => !lifecycle.draining,
    metrics,
    reloadConfig: () => reloader.reload('api'),
    accounts,
    tiers: cfg.accountService.tiers,
    onKeyRevoked: (hash) => void revoked(hash),
    recallLeases,
  });
  await admin.listen({ host: cfg.listen.admin.host, port: cfg.listen.admin.port });
  const adminPort = (admin.server.address() as { port: number }).port;
  // The embedded memory store lives in this process, so the account service does too (its own listener).
  const accountService =
    store.kind === 'memory'
      ? buildAccountService({ cfg, store, ledger, accounts, trigger, payments, log, onKeyRevoked: revoked, recallLeases })
      : null;
  if (accountService) {
    const url = new URL(cfg.accountService.url);
    await accountService.listen({ host: url.hostname, port: Number(url.port) });
  }
  // Background money work: journaled settlements retried, leases of live holds renewed,
  // holds whose lease ran out (their owner died) released, also those of this
  // instance's previous life right after a restart.
  const leaseMs = Math.min(cfg.billing.holdLeaseSeconds, cfg.billing.holdTtlSeconds) * 1000;
  const retryJournal = () =>
    billing.retryPending().then((left) => {
      if (left >= 0) metrics.journal(left);
    }, () => {});
  const retry = setInterval(() => void retryJournal(), 2000);
  const renew = setInterval(() => void billing.renewLeases().catch(() => {}), Math.max(100, leaseMs / 3));
  const reap = () =>
    void billing.reap().then(
      (n) => n > 0 && log.warn({ holds: n }, 'released holds whose lease ran out (their instance stopped without settling)'),
      () => {},
    );
  const reaper = setInterval(reap, Math.min(30_000, Math.max(250, leaseMs / 2)));
  // Store reachability for the store_up gauge (alerts), every 5 s; and a configuration
  // reload another instance published that this one did not hear is applied within 5 s.
  const pingStores = () => {
    store.ping().then(() => metrics.storeReachable('keys', true), () => metrics.storeReachable('keys', false));
    ledger.ping().then(() => metrics.storeReachable('ledger', true), () => metrics.storeReachable('ledger', false));
    void reloader.catchUp();
  };
  const pinger = setInterval(pingStores, 5000);
  pingStores();
  retry.unref();
  renew.unref();
  reaper.unref();
  pinger.unref();
  void retryJournal();
  reap();
  log.info({ grpc: cfg.listen.sidecarGrpc, grpc_port: grpc.port, admin_port: adminPort, store: store.kind, instance }, 'sidecar ready');
  // The provider is looked at once, in the background: findings are warnings, never a reason not to serve.
  if (env.PROVIDER_CHECK !== '0') {
    void checkProvider(cfg, { env }).then((findings) => {
      for (const f of findings) log.warn({ check: 'provider', finding: f.kind }, f.logMessage);
      if (!findings.length) log.info({ check: 'provider' }, 'provider answered its model list with every configured model');
    });
  }

  let hurry: (() => void) | null = null;
  return {
    grpcPort: grpc.port,
    adminPort,
    metrics,
    /** Re-reads the configuration file and applies it on every instance (SIGHUP). */
    reload: () => reloader.reload('sighup'),
    /** A second stop signal: end the drain now (streams still open end with the error event). */
    hurry: () => hurry?.(),
    /**
     * A normal stop: readiness false and new requests refused first; exchanges in
     * flight run to their end up to the drain deadline, those left are ended then
     * (streams with the error event, charged for what they delivered); every
     * settlement and release is written or journaled, the journal retried once
     * more, and only then are the store connections closed.
     */
    async close(drainMs = cfg.shutdown.drainSeconds * 1000) {
      lifecycle.drain();
      const started = Date.now();
      log.info({ drain_seconds: drainMs / 1000, exchanges: live.size, holds: billing.inFlight.holds }, 'stopping: draining');
      let deadline = started + drainMs;
      hurry = () => {
        deadline = 0;
      };
      const busy = () => {
        const b = billing.inFlight;
        return live.size + lifecycle.checksInFlight + b.holds + b.unclaimed + b.finishing > 0;
      };
      while (busy() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      if (live.size > 0) {
        log.warn({ exchanges: live.size }, 'drain deadline reached: ending the exchanges still open');
        live.endAll();
      }
      await billing.releaseAllUnclaimed();
      await billing.stopLeasing();
      await Promise.race([billing.settled(), new Promise((r) => setTimeout(r, 10_000).unref())]);
      clearInterval(retry);
      clearInterval(renew);
      clearInterval(reaper);
      clearInterval(pinger);
      recordAll();
      const journaled = await billing.retryPending().catch(() => -1);
      // Settlements still on their way (the store did not answer within the wait) stay
      // recorded for the next start.
      const unconfirmed = journal.intended;
      journal.close();
      log.info({ drained_ms: Date.now() - started, journal_pending: journaled, ...(unconfirmed ? { settlements_unconfirmed: unconfirmed } : {}) }, 'drained; closing the store connections');
      await grpc.close();
      await admin.close();
      await accountService?.close();
      await ledger.close();
      await keyEvents.close();
      await accounts.close();
      await trigger.close();
      await store.close();
      closeLogger(log);
    },
  };
}

async function main() {
  // Stack traces mapped through source maps cost ~60 µs per stream reset (a client that leaves); off unless asked for.
  if (process.env.SIDECAR_SOURCE_MAPS !== '1') process.setSourceMapsEnabled(false);
  const cfg = loadConfigOrExit();
  const sidecar = await startSidecar(cfg);
  process.stdout.write(`${JSON.stringify({ event: 'listening', grpcPort: sidecar.grpcPort, adminPort: sidecar.adminPort })}\n`);
  let stopping = false;
  const stop = async () => {
    if (stopping) {
      sidecar.hurry(); // a second signal: end the drain now
      return;
    }
    stopping = true;
    await sidecar.close();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  process.on('SIGHUP', () => void sidecar.reload());
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((err: unknown) => {
    process.stderr.write(`sidecar failed to start: ${(err as Error).message}\n`);
    process.exit(1);
  });
}

import { z } from 'zod';
import { DEFAULT_OUTBOUND_TLS, OutboundTlsSchema } from './outbound-tls.js';

/**
 * The one configuration file of the gateway, validated once at start.
 * Every problem is reported at once (zod collects all issues).
 * Money is integer micro-units of `billing.currency`.
 */

const port = z.number().int().min(0).max(65535);
const hostPort = z.object({ host: z.string().min(1), port });
const yearMonth = /-(\d{4})-(0[1-9]|1[0-2])$/;

export const ModelFamilySchema = z
  .object({
    /** Floating alias, e.g. svc-quick. */
    alias: z.string().regex(/^[a-z0-9][a-z0-9-]*$/, 'lower-case letters, digits and dashes'),
    /** Pinned counterpart, e.g. svc-quick-2026-08 (ends with YYYY-MM). */
    pinned: z.string().regex(yearMonth, 'must end with -YYYY-MM'),
    kind: z.enum(['chat', 'embedding']),
    owner: z.string().min(1),
    /** Internal (provider) model the floating alias points to now. */
    model: z.string().min(1),
    /** Internal model the pinned alias points to, forever. */
    pinnedModel: z.string().min(1),
    /** Raise max_tokens to at least this (reasoning models only). */
    maxTokensFloor: z.number().int().positive().nullable().default(null),
    /**
     * Output cap sent upstream when the caller names none, so every request has
     * a worst-case cost the credit hold can cover.
     */
    maxOutputTokens: z.number().int().positive().default(4096),
  })
  .strict();

const micro = z.number().int().min(0);

/** Credit tiers on offer by default: 10, 25, 50 and 100 units of the currency. */
export const DEFAULT_TIERS = [
  { id: 'tier_10', amount: 10_000_000, label: '10' },
  { id: 'tier_25', amount: 25_000_000, label: '25' },
  { id: 'tier_50', amount: 50_000_000, label: '50' },
  { id: 'tier_100', amount: 100_000_000, label: '100' },
];

/** Prices in integer micro-units of the currency: per million tokens, or per embedding input. */
export const PriceSchema = z
  .object({
    inputPerMillion: micro.default(0),
    outputPerMillion: micro.default(0),
    perInput: micro.default(0),
  })
  .strict();

export const BillingSchema = z
  .object({
    currency: z.string().regex(/^[A-Z]{3}$/, 'ISO 4217 code').default('CHF'),
    /** Refuse (402) requests whose worst-case cost the available balance cannot cover. */
    creditCheck: z.boolean().default(false),
    /** Shown as text inside the 402 message. */
    topUpUrl: z.url().default('https://portal.svc.example/billing/top-up'),
    /** The longest a hold can live, even while its exchange renews its lease. */
    holdTtlSeconds: z.number().int().positive().default(3600),
    /**
     * A hold's lease: the live exchange renews it every third of this; a hold whose
     * owner died (kill -9) is released by any instance within 1.5 × this.
     */
    holdLeaseSeconds: z.number().positive().max(3600).default(15),
    /** A hold whose request never reached response processing (the client left) is released after this long. */
    claimGraceSeconds: z.number().int().positive().default(15),
    /** Settlements the store could not take are kept here and retried until applied (survives restarts). */
    journalPath: z.string().min(1).default('.run/settlement-journal.jsonl'),
    rateLimits: z
      .object({
        requestsPerMinute: z.number().int().positive().nullable().default(null),
        tokensPerMinute: z.number().int().positive().nullable().default(null),
        per: z.enum(['key', 'tenant']).default('key'),
      })
      .strict()
      .default({ requestsPerMinute: null, tokensPerMinute: null, per: 'key' }),
    /**
     * Credit leases (see domain/billing/credit-leases.ts): each instance sets a slice of a
     * busy tenant's credit aside and admits its requests against it without a round trip
     * to the store. Not used while rate limits are on (their counters are per request).
     */
    creditLease: z
      .object({
        enabled: z.boolean().default(true),
        /** A lease is sized for this many requests like the one that opened or grew it. */
        requests: z.number().int().min(2).max(10_000).default(32),
        /** A lease takes at most this share (1 / headroom) of the available balance and of the cap's room. */
        headroom: z.number().int().min(1).max(1_000).default(4),
        /** A tenant's lease is given back after this long without a request. */
        idleSeconds: z.number().positive().max(3600).default(2),
      })
      .strict()
      .default({ enabled: true, requests: 32, headroom: 4, idleSeconds: 2 }),
    /** Price per internal model; every internal model must have one. */
    prices: z.record(z.string(), PriceSchema),
  })
  .strict();

const RedisUrl = z.string().regex(/^rediss?:\/\//, 'redis:// or rediss:// URL');

/** How the sidecar authenticates to Redis (one server or every Cluster node). */
const RedisAccess = {
  /** ACL user; null: the default user (or the one in the URL). */
  username: z.string().min(1).nullable().default(null),
  /** File holding the Redis password (wins over passwordEnv). */
  passwordFile: z.string().min(1).nullable().default(null),
  /** Environment variable holding the Redis password. */
  passwordEnv: z.string().min(1).nullable().default('REDIS_PASSWORD'),
  /** How a rediss:// server is verified (and a client certificate presented); on a Cluster, every node against the first seed's host name. */
  tls: OutboundTlsSchema.default(DEFAULT_OUTBOUND_TLS),
};

/** How long usage records and ledger entries are kept unless `retention` says otherwise (both ledgers' default too). */
export const DEFAULT_RETENTION_DAYS = Object.freeze({ usageRecordDays: 90, ledgerDays: 400 });

export const ConfigSchema = z
  .object({
    brand: z.string().regex(/^[a-z][a-z0-9]{1,15}$/, 'lower-case letters and digits, 2-16 chars').default('svc'),
    listen: z
      .object({
        gateway: hostPort,
        envoyAdmin: hostPort,
        /** Where the sidecar serves gRPC: "unix:/path.sock" or "host:port". */
        sidecarGrpc: z.string().min(1),
        /** Operator API of the sidecar (CLI, health); keep it on loopback. */
        admin: hostPort,
      })
      .strict(),
    upstream: z
      .object({
        /** OpenAI-compatible base URL including its version prefix, e.g. https://api.example.com/v1 */
        baseUrl: z.url({ protocol: /^https?$/ }),
        /** Name of the environment variable that holds the provider key. */
        apiKeyEnv: z.string().min(1).nullable().default(null),
        /** Path of a file that holds the provider key (wins over apiKeyEnv). */
        apiKeyFile: z.string().min(1).nullable().default(null),
        connectTimeoutMs: z.number().int().positive().default(5000),
        /** No byte from the provider for this long ends the request (502). */
        idleTimeoutMs: z.number().int().positive().default(300_000),
        /** How Envoy verifies an https:// provider (and presents a client certificate). */
        tls: OutboundTlsSchema.default(DEFAULT_OUTBOUND_TLS),
      })
      .strict(),
    accountService: z
      .object({
        url: z.url({ protocol: /^https?$/ }),
        /** How Envoy verifies an https:// account service (and presents a client certificate), as upstream.tls. */
        tls: OutboundTlsSchema.default(DEFAULT_OUTBOUND_TLS),
        billingEnabled: z.boolean().default(false),
        /** Payment provider base URL (the bundled payment simulator locally); null: top-ups answer topup_not_configured. */
        paymentsUrl: z.url({ protocol: /^https?$/ }).nullable().default(null),
        /** How an https:// paymentsUrl is verified (outbound TLS, docs/outbound-tls.md). */
        paymentsTls: OutboundTlsSchema.default(DEFAULT_OUTBOUND_TLS),
        /** Credit tiers on offer until the operator sets others (operator CLI `tier set`). */
        tiers: z
          .array(z.object({ id: z.string().regex(/^[a-z0-9_-]{1,40}$/), amount: micro.positive(), label: z.string().max(80).default('') }).strict())
          .default(DEFAULT_TIERS),
        /** Free-amount top-ups: whole cents between these bounds (micro-units). */
        minTopupAmount: micro.positive().default(5_000_000),
        maxTopupAmount: micro.positive().default(10_000_000_000),
        /** Top-up attempts that reach the payment provider, per workspace per minute (card-testing guard); above: 429 RATE_001. */
        topupsPerMinute: z.number().int().positive().default(20),
        /** Transaction history page size: default and maximum. */
        pageSize: z.number().int().positive().default(20),
        maxPageSize: z.number().int().positive().default(100),
      })
      .strict(),
    models: z.array(ModelFamilySchema).min(1),
    limits: z
      .object({
        maxRequestBytes: z.number().int().positive().default(2 * 1024 * 1024),
        maxResponseBytes: z.number().int().positive().default(32 * 1024 * 1024),
        maxEmbeddingInputs: z.number().int().positive().default(256),
        /** Request headers a client may send (431 above); the gateway's own headers have room on top. */
        maxRequestHeaders: z.number().int().min(16).max(500).default(100),
        /** What Envoy buffers per connection before it stops reading (slow readers, bodies awaiting the key check). */
        connectionBufferBytes: z.number().int().min(16 * 1024).default(64 * 1024),
        /** Longest a request may last, streams included (longer than any legitimate svc-deep answer). */
        maxStreamSeconds: z.number().int().positive().default(1800),
        /**
         * Envoy's heap bound for its overload manager: at 95 % it shrinks its heap, at 98 %
         * it refuses new requests (503) instead of growing until the host or the container
         * limit kills it. Keep it below the memory the Envoy container may use.
         */
        envoyHeapBytes: z.number().int().min(64 * 1024 * 1024).default(2 * 1024 * 1024 * 1024),
      })
      .strict()
      .default({
        maxRequestBytes: 2 * 1024 * 1024,
        maxResponseBytes: 32 * 1024 * 1024,
        maxEmbeddingInputs: 256,
        maxRequestHeaders: 100,
        connectionBufferBytes: 64 * 1024,
        maxStreamSeconds: 1800,
        envoyHeapBytes: 2 * 1024 * 1024 * 1024,
      }),
    /**
     * A normal stop (SIGTERM/SIGINT): readiness goes false and new requests get a 503
     * at once; exchanges in flight run to their end for up to drainSeconds (a long
     * svc-deep answer); streams still open then end with the error event and are
     * charged for what they delivered.
     */
    shutdown: z
      .object({ drainSeconds: z.number().min(0).max(3600).default(120) })
      .strict()
      .default({ drainSeconds: 120 }),
    defaults: z
      .object({ temperature: z.number().min(0).max(2).default(0.7) })
      .strict()
      .default({ temperature: 0.7 }),
    /**
     * The platform identity provider whose session tokens (JWTs) are accepted on
     * /credits* and /accounts*. No JWKS configured: no bearer ever verifies as a session.
     */
    identity: z
      .object({
        jwksFile: z.string().min(1).nullable().default(null),
        jwksUrl: z.url({ protocol: /^https?$/ }).nullable().default(null),
        issuer: z.string().min(1).default('https://identity.svc.local'),
        audience: z.string().min(1).default('svc-gateway'),
        /** Platform sessions last 60 minutes; a token claiming longer is refused. */
        maxLifetimeSeconds: z.number().int().positive().default(3600),
        clockToleranceSeconds: z.number().int().min(0).max(300).default(30),
        /** How often a JWKS URL is fetched again. */
        refreshSeconds: z.number().int().positive().default(300),
        /** How an https:// JWKS URL is verified. */
        tls: OutboundTlsSchema.default(DEFAULT_OUTBOUND_TLS),
      })
      .strict()
      .refine((i) => i.jwksUrl === null || i.jwksUrl.startsWith('https:') || isLoopbackUrl(i.jwksUrl), {
        message: 'must be https:// (plain http only on a loopback address)',
        path: ['jwksUrl'],
      })
      .default({
        jwksFile: null,
        jwksUrl: null,
        issuer: 'https://identity.svc.local',
        audience: 'svc-gateway',
        maxLifetimeSeconds: 3600,
        clockToleranceSeconds: 30,
        refreshSeconds: 300,
        tls: DEFAULT_OUTBOUND_TLS,
      }),
    billing: BillingSchema,
    auth: z
      .object({
        /** How long a found key is served from memory (revocations drop it at once; this bounds a lost message). */
        keyCacheSeconds: z.number().int().min(0).max(300).default(30),
      })
      .strict()
      .default({ keyCacheSeconds: 30 }),
    store: z
      .discriminatedUnion('kind', [
        z.object({ kind: z.literal('memory') }).strict(),
        z.object({ kind: z.literal('redis'), url: RedisUrl, ...RedisAccess }).strict(),
        /** A Redis Cluster: seed nodes (any of its masters or replicas; the client discovers the rest). */
        z
          .object({
            kind: z.literal('redis-cluster'),
            nodes: z
              .array(RedisUrl.regex(/^rediss?:\/\/([^@/]*@)?[^/:@]+:\d+\/?$/, 'redis://[user:password@]host:port (no database: a Cluster has only database 0)'))
              .min(1)
              .max(64)
              .refine((urls) => new Set(urls.map((u) => u.split(':', 1)[0])).size === 1, 'every node URL uses the same scheme'),
            /**
             * Replicas that must acknowledge a settlement or balance change (WAIT) before it
             * counts as written; fewer and the settlement journal retries it. Set it to the
             * replicas per master (1) so a master's death loses nothing; 0 without replicas.
             */
            replicaAcks: z.number().int().min(0).max(5).default(0),
            ...RedisAccess,
          })
          .strict(),
      ])
      .default({ kind: 'memory' }),
    /**
     * How long usage records and ledger entries (the per-tenant Redis streams) are
     * kept. Entries older than this are trimmed as new ones are written (whole stream
     * nodes, so up to ~100 older entries may linger), and a stream nobody writes to
     * for that long expires. Daily usage totals are kept 400 days regardless.
     */
    retention: z
      .object({
        usageRecordDays: z.number().int().min(1).max(3650).default(DEFAULT_RETENTION_DAYS.usageRecordDays),
        ledgerDays: z.number().int().min(1).max(3650).default(DEFAULT_RETENTION_DAYS.ledgerDays),
      })
      .strict()
      .default({ ...DEFAULT_RETENTION_DAYS }),
    log: z
      .object({ level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info') })
      .strict()
      .default({ level: 'info' }),
  })
  .strict();

/** http(s) URL whose host is a loopback address or localhost. */
function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname.replace(/^\[|\]$/g, '');
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

/**
 * Cross-field rules of the model families, checked on the raw input so they
 * are reported together with every schema problem (zod skips refinements of
 * an object once one of its fields fails).
 */
export function modelRuleProblems(raw: unknown): string[] {
  const problems: string[] = [];
  const cfg = (raw ?? {}) as { brand?: unknown; models?: unknown };
  const brand = typeof cfg.brand === 'string' ? cfg.brand : 'svc';
  if (!Array.isArray(cfg.models)) return problems;
  const seen = new Set<string>();
  const internal = new Set<string>();
  cfg.models.forEach((m: unknown, i: number) => {
    if (typeof m !== 'object' || m === null) return;
    const f = m as Record<string, unknown>;
    for (const field of ['model', 'pinnedModel'] as const) if (typeof f[field] === 'string') internal.add(f[field] as string);
    for (const field of ['alias', 'pinned'] as const) {
      const name = f[field];
      if (typeof name !== 'string') continue;
      if (!name.startsWith(`${brand}-`)) problems.push(`models.${i}.${field}: must start with "${brand}-" (the brand prefix)`);
      if (seen.has(name)) problems.push(`models.${i}.${field}: duplicate alias`);
      seen.add(name);
    }
    if (typeof f.alias === 'string' && typeof f.pinned === 'string' && !f.pinned.startsWith(`${f.alias}-`)) {
      problems.push(`models.${i}.pinned: must be the floating alias followed by -YYYY-MM`);
    }
    if (f.maxTokensFloor != null && f.kind !== 'chat') problems.push(`models.${i}.maxTokensFloor: only chat models take a max_tokens floor`);
  });
  if ([...seen].some((name) => internal.has(name))) problems.push('models: an alias may not equal an internal model name');
  const prices = (raw as { billing?: { prices?: unknown } }).billing?.prices;
  const priced = typeof prices === 'object' && prices !== null ? new Set(Object.keys(prices)) : new Set<string>();
  for (const model of [...internal].sort()) {
    if (!priced.has(model)) problems.push(`billing.prices: the internal model ${model} has no price`);
  }
  return problems;
}

export type Config = z.infer<typeof ConfigSchema>;
export type Price = z.infer<typeof PriceSchema>;
export type ModelFamily = z.infer<typeof ModelFamilySchema>;

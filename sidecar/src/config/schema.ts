import { z } from 'zod';

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
  })
  .strict();

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
      })
      .strict(),
    accountService: z
      .object({
        url: z.url({ protocol: /^https?$/ }),
        billingEnabled: z.boolean().default(false),
      })
      .strict(),
    models: z.array(ModelFamilySchema).min(1),
    limits: z
      .object({
        maxRequestBytes: z.number().int().positive().default(2 * 1024 * 1024),
        maxResponseBytes: z.number().int().positive().default(32 * 1024 * 1024),
        maxEmbeddingInputs: z.number().int().positive().default(256),
      })
      .strict()
      .default({ maxRequestBytes: 2 * 1024 * 1024, maxResponseBytes: 32 * 1024 * 1024, maxEmbeddingInputs: 256 }),
    defaults: z
      .object({ temperature: z.number().min(0).max(2).default(0.7) })
      .strict()
      .default({ temperature: 0.7 }),
    store: z
      .discriminatedUnion('kind', [
        z.object({ kind: z.literal('memory') }).strict(),
        z.object({ kind: z.literal('redis'), url: z.string().regex(/^rediss?:\/\//, 'redis:// or rediss:// URL') }).strict(),
      ])
      .default({ kind: 'memory' }),
    log: z
      .object({ level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info') })
      .strict()
      .default({ level: 'info' }),
  })
  .strict()
  .superRefine((cfg, ctx) => {
    const seen = new Set<string>();
    cfg.models.forEach((m, i) => {
      for (const [field, name] of [['alias', m.alias], ['pinned', m.pinned]] as const) {
        if (!name.startsWith(`${cfg.brand}-`)) {
          ctx.addIssue({ code: 'custom', path: ['models', i, field], message: `must start with "${cfg.brand}-" (the brand prefix)` });
        }
        if (seen.has(name)) ctx.addIssue({ code: 'custom', path: ['models', i, field], message: 'duplicate alias' });
        seen.add(name);
      }
      if (!m.pinned.startsWith(`${m.alias}-`)) {
        ctx.addIssue({ code: 'custom', path: ['models', i, 'pinned'], message: 'must be the floating alias followed by -YYYY-MM' });
      }
      if (m.maxTokensFloor !== null && m.kind !== 'chat') {
        ctx.addIssue({ code: 'custom', path: ['models', i, 'maxTokensFloor'], message: 'only chat models take a max_tokens floor' });
      }
    });
    const internal = new Set(cfg.models.flatMap((m) => [m.model, m.pinnedModel]));
    for (const name of seen) {
      if (internal.has(name)) ctx.addIssue({ code: 'custom', path: ['models'], message: 'an alias may not equal an internal model name' });
    }
  });

export type Config = z.infer<typeof ConfigSchema>;
export type ModelFamily = z.infer<typeof ModelFamilySchema>;

import { z } from 'zod';
import type { Price } from '../../config/schema.js';
import type { LeaseCommitment, SettleInput } from '../../store/ledger-contract.js';
import { costOf, dayOf, periodOf } from './pricing.js';

/**
 * Everything a request's settlement is computed from, known when its answer
 * ends. Recorded (one short line) before that answer leaves, so the little
 * work done ahead of the answer is gathering these; the charge, the period
 * and the usage record are computed from them afterwards, by the same
 * function whether the settlement is written at once or after a crash.
 */
export interface SettlementFacts {
  readonly requestId: string;
  readonly tenantId: string;
  readonly keyId: string | null;
  /** When the request started (its usage time, day and spend-cap period). */
  readonly startedAt: number;
  /** When the answer ended (the ledger entry's time). */
  readonly now: number;
  readonly alias: string;
  readonly internalModel: string;
  readonly promptTokens: number;
  readonly completionTokens: number;
  readonly totalTokens: number;
  readonly estimated: boolean;
  readonly requestCount: number;
  /** The price the request was admitted at. */
  readonly price: Price;
  readonly creditCheck: boolean;
  /** The credit lease the request is committed in (it has no hold of its own). */
  readonly lease: LeaseCommitment | null;
}

/** The settlement the ledger takes; throws a RangeError for a cost no ledger could take. */
export function settleInputOf(f: SettlementFacts): SettleInput {
  return {
    ...(f.lease ? { lease: f.lease } : {}),
    tenantId: f.tenantId,
    requestId: f.requestId,
    charge: costOf(f.price, f, f.requestCount),
    creditCheck: f.creditCheck,
    period: periodOf(f.startedAt),
    day: dayOf(f.startedAt),
    now: f.now,
    usage: {
      time: new Date(f.startedAt).toISOString(),
      tenantId: f.tenantId,
      keyId: f.keyId,
      alias: f.alias,
      internalModel: f.internalModel,
      promptTokens: f.promptTokens,
      completionTokens: f.completionTokens,
      totalTokens: f.totalTokens,
      requestCount: f.requestCount,
      requestId: f.requestId,
      estimated: f.estimated,
    },
  };
}

/** The line's first element: its layout. A layout is never changed, only added. */
const LAYOUT = 's1';

/** One JSON array, fields in a fixed order (cheaper to write than an object, and shorter). */
export function encodeFacts(f: SettlementFacts): string {
  return JSON.stringify([
    LAYOUT, f.requestId, f.tenantId, f.keyId, f.startedAt, f.now, f.alias, f.internalModel,
    f.promptTokens, f.completionTokens, f.totalTokens, f.estimated ? 1 : 0, f.requestCount,
    f.price.inputPerMillion, f.price.outputPerMillion, f.price.perInput, f.creditCheck ? 1 : 0,
    f.lease?.id ?? null, f.lease?.amount ?? null,
  ]);
}

const count = z.number().int().nonnegative();
const flag = z.union([z.literal(0), z.literal(1)]);
const Layout1 = z.tuple([
  z.literal(LAYOUT), z.string().min(1), z.string().min(1), z.string().nullable(), count, count, z.string(), z.string(),
  count, count, count, flag, count,
  count, count, count, flag,
  z.string().min(1).nullable(), count.nullable(),
]);

/** The facts of a line `encodeFacts` wrote; null for anything else (a torn or foreign line). */
export function decodeFacts(line: string): SettlementFacts | null {
  try {
    return fromLayout1(JSON.parse(line));
  } catch {
    return null;
  }
}

function fromLayout1(raw: unknown): SettlementFacts | null {
  const [, requestId, tenantId, keyId, startedAt, now, alias, internalModel, promptTokens, completionTokens, totalTokens, estimated, requestCount, inputPerMillion, outputPerMillion, perInput, creditCheck, leaseId, leaseAmount] = Layout1.parse(raw);
  // A lease is its id and its amount, or neither.
  if ((leaseId === null) !== (leaseAmount === null)) return null;
  return {
    requestId, tenantId, keyId, startedAt, now, alias, internalModel, promptTokens, completionTokens, totalTokens,
    estimated: estimated === 1, requestCount,
    price: { inputPerMillion, outputPerMillion, perInput },
    creditCheck: creditCheck === 1,
    lease: leaseId === null ? null : { id: leaseId, amount: leaseAmount as number },
  };
}

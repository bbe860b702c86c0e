/**
 * Input checks shared by the ledger implementations, so both refuse the same
 * inputs: bad input is a bug, refused (TypeError) before any write.
 */
import type { LeaseCommitment, LeaseInput, MoveInput, RateLimits, ReserveInput, SettleInput, UsageRecord } from './ledger-contract.js';

const DAY = /^\d{4}-\d{2}-\d{2}$/;

export function nonNegativeInteger(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new TypeError(`${what} must be a non-negative safe integer`);
  }
  return value;
}

export function nonEmpty(value: unknown, what: string): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw new TypeError(`${what} must be a non-empty string`);
  }
  return value;
}

export function stringOrNull(value: unknown, what: string): string | null {
  if (value !== null && typeof value !== 'string') throw new TypeError(`${what} must be a string or null`);
  return value;
}

export function instant(value: unknown, what: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw new TypeError(`${what} must be a finite, non-negative epoch time`);
  }
  return value;
}

export function day(value: unknown, what: string): string {
  if (typeof value !== 'string' || !DAY.test(value)) throw new TypeError(`${what} must be a YYYY-MM-DD day`);
  return value;
}

/** A balance adjustment (grant or deduct), as both ledgers take it. */
export function checkAdjust(tenantId: unknown, amount: unknown, idempotencyKey: unknown, reason: unknown, now: unknown): void {
  nonEmpty(tenantId, 'tenantId');
  if (typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount === 0) {
    throw new TypeError('amount must be a non-zero safe integer');
  }
  nonEmpty(idempotencyKey, 'idempotencyKey');
  if (typeof reason !== 'string') throw new TypeError('reason must be a string');
  instant(now, 'now');
}

/** A lease renewal, as both ledgers take it. */
export function checkRenew(tenantId: unknown, requestIds: unknown, now: unknown, leaseSeconds: unknown): void {
  nonEmpty(tenantId, 'tenantId');
  if (!Array.isArray(requestIds)) throw new TypeError('requestIds must be an array');
  for (const r of requestIds) nonEmpty(r, 'requestIds[]');
  instant(now, 'now');
  if (typeof leaseSeconds !== 'number' || !Number.isFinite(leaseSeconds) || leaseSeconds <= 0) {
    throw new TypeError('leaseSeconds must be a positive number');
  }
}

/** How many rows a listing returns. */
export function checkListing(tenantId: unknown, limit: unknown): number {
  nonEmpty(tenantId, 'tenantId');
  return nonNegativeInteger(limit, 'limit');
}

export function checkLimits(value: RateLimits | null): RateLimits | null {
  if (value === null) return null;
  if (typeof value !== 'object') throw new TypeError('limits must be an object or null');
  const limit = (v: unknown, what: string): number | null => (v === null ? null : nonNegativeInteger(v, what));
  return {
    requestsPerMinute: limit(value.requestsPerMinute, 'limits.requestsPerMinute'),
    tokensPerMinute: limit(value.tokensPerMinute, 'limits.tokensPerMinute'),
    scopeId: nonEmpty(value.scopeId, 'limits.scopeId'),
  };
}

export function checkReserve(input: ReserveInput): ReserveInput {
  if (typeof input !== 'object' || input === null) throw new TypeError('reserve input must be an object');
  if (typeof input.creditCheck !== 'boolean') throw new TypeError('creditCheck must be a boolean');
  const ttl = input.holdTtlSeconds;
  if (typeof ttl !== 'number' || !Number.isFinite(ttl) || ttl <= 0) {
    throw new TypeError('holdTtlSeconds must be a positive number');
  }
  const lease = input.leaseSeconds;
  if (lease !== undefined && (typeof lease !== 'number' || !Number.isFinite(lease) || lease <= 0)) {
    throw new TypeError('leaseSeconds must be a positive number');
  }
  if (input.owner !== undefined && typeof input.owner !== 'string') throw new TypeError('owner must be a string');
  if (typeof input.minute !== 'number' || !Number.isSafeInteger(input.minute)) {
    throw new TypeError('minute must be a safe integer');
  }
  return {
    tenantId: nonEmpty(input.tenantId, 'tenantId'),
    requestId: nonEmpty(input.requestId, 'requestId'),
    keyId: stringOrNull(input.keyId, 'keyId'),
    amount: nonNegativeInteger(input.amount, 'amount'),
    tokens: nonNegativeInteger(input.tokens, 'tokens'),
    creditCheck: input.creditCheck,
    period: nonEmpty(input.period, 'period'),
    minute: input.minute,
    limits: checkLimits(input.limits),
    holdTtlSeconds: ttl,
    leaseSeconds: Math.min(lease ?? ttl, ttl),
    owner: input.owner ?? '',
    now: instant(input.now, 'now'),
  };
}

export function checkUsage(value: SettleInput['usage']): Omit<UsageRecord, 'cost'> {
  if (typeof value !== 'object' || value === null) throw new TypeError('usage must be an object');
  if (typeof value.time !== 'string' || Number.isNaN(Date.parse(value.time))) {
    throw new TypeError('usage.time must be an ISO-8601 timestamp');
  }
  if (typeof value.internalModel !== 'string') throw new TypeError('usage.internalModel must be a string');
  if (typeof value.estimated !== 'boolean') throw new TypeError('usage.estimated must be a boolean');
  return {
    time: value.time,
    tenantId: nonEmpty(value.tenantId, 'usage.tenantId'),
    keyId: stringOrNull(value.keyId, 'usage.keyId'),
    alias: nonEmpty(value.alias, 'usage.alias'),
    internalModel: value.internalModel,
    promptTokens: nonNegativeInteger(value.promptTokens, 'usage.promptTokens'),
    completionTokens: nonNegativeInteger(value.completionTokens, 'usage.completionTokens'),
    totalTokens: nonNegativeInteger(value.totalTokens, 'usage.totalTokens'),
    requestCount: nonNegativeInteger(value.requestCount, 'usage.requestCount'),
    requestId: nonEmpty(value.requestId, 'usage.requestId'),
    estimated: value.estimated,
  };
}

export function checkSettle(input: SettleInput): SettleInput {
  if (typeof input !== 'object' || input === null) throw new TypeError('settle input must be an object');
  if (typeof input.creditCheck !== 'boolean') throw new TypeError('creditCheck must be a boolean');
  return {
    tenantId: nonEmpty(input.tenantId, 'tenantId'),
    requestId: nonEmpty(input.requestId, 'requestId'),
    charge: nonNegativeInteger(input.charge, 'charge'),
    creditCheck: input.creditCheck,
    period: nonEmpty(input.period, 'period'),
    day: day(input.day, 'day'),
    usage: checkUsage(input.usage),
    now: instant(input.now, 'now'),
    ...(input.lease === undefined ? {} : { lease: checkCommitment(input.lease, input.requestId) }),
  };
}

function checkCommitment(c: LeaseCommitment, requestId: string): LeaseCommitment {
  if (typeof c !== 'object' || c === null) throw new TypeError('lease must be an object');
  const id = nonEmpty(c.id, 'lease.id');
  if (id === requestId) throw new TypeError('a request cannot be its own lease');
  return { id, amount: nonNegativeInteger(c.amount, 'lease.amount') };
}


/** Every UTC day from `from` to `to` inclusive ("YYYY-MM-DD"); at most 400 days. */
export function daysBetween(from: string, to: string): string[] {
  if (!DAY.test(from) || !DAY.test(to)) throw new TypeError('days must be YYYY-MM-DD');
  const out: string[] = [];
  const end = Date.parse(`${to}T00:00:00Z`);
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= end && out.length <= 400; t += 86_400_000) {
    out.push(new Date(t).toISOString().slice(0, 10));
  }
  return out;
}

const positive = (value: unknown, what: string): number => {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) throw new TypeError(`${what} must be a positive number`);
  return value;
};

export function checkLease(input: LeaseInput): LeaseInput {
  if (typeof input !== 'object' || input === null) throw new TypeError('lease input must be an object');
  if (typeof input.creditCheck !== 'boolean') throw new TypeError('creditCheck must be a boolean');
  if (typeof input.owner !== 'string') throw new TypeError('owner must be a string');
  const ttl = positive(input.holdTtlSeconds, 'holdTtlSeconds');
  const amount = nonNegativeInteger(input.amount, 'amount');
  const minimum = nonNegativeInteger(input.minimum, 'minimum');
  const headroom = nonNegativeInteger(input.headroom, 'headroom');
  if (amount < 1 || minimum < 1 || headroom < 1) throw new TypeError('amount, minimum and headroom must be at least 1');
  return {
    tenantId: nonEmpty(input.tenantId, 'tenantId'),
    leaseId: nonEmpty(input.leaseId, 'leaseId'),
    amount,
    minimum,
    headroom,
    creditCheck: input.creditCheck,
    period: nonEmpty(input.period, 'period'),
    holdTtlSeconds: ttl,
    leaseSeconds: Math.min(positive(input.leaseSeconds, 'leaseSeconds'), ttl),
    owner: input.owner,
    now: instant(input.now, 'now'),
  };
}

function flag(v: boolean | undefined, name: string): boolean {
  if (v !== undefined && typeof v !== 'boolean') throw new TypeError(`${name} must be a boolean`);
  return v === true;
}

export function checkMove(input: MoveInput): MoveInput {
  if (typeof input !== 'object' || input === null) throw new TypeError('move input must be an object');
  if (typeof input.owner !== 'string') throw new TypeError('owner must be a string');
  const ttl = positive(input.holdTtlSeconds, 'holdTtlSeconds');
  const leaseId = nonEmpty(input.leaseId, 'leaseId');
  const requestId = nonEmpty(input.requestId, 'requestId');
  if (leaseId === requestId) throw new TypeError('a lease cannot be moved into itself');
  return {
    tenantId: nonEmpty(input.tenantId, 'tenantId'),
    leaseId,
    requestId,
    keyId: stringOrNull(input.keyId, 'keyId'),
    amount: nonNegativeInteger(input.amount, 'amount'),
    period: nonEmpty(input.period, 'period'),
    holdTtlSeconds: ttl,
    leaseSeconds: Math.min(positive(input.leaseSeconds, 'leaseSeconds'), ttl),
    owner: input.owner,
    now: instant(input.now, 'now'),
    admitted: flag(input.admitted, 'admitted'),
    claim: flag(input.claim, 'claim'),
  };
}

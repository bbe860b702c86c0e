import { AfterTurn } from './after-turn.js';
import type { Config, Price } from '../../config/schema.js';
import { NotReplicatedError, StoreUnavailableError } from '../../store/contract.js';
import type { LeaseCommitment, Ledger, MoveOutcome, ReserveOutcome, SettleInput } from '../../store/ledger-contract.js';
import type { Principal } from '../auth/principal.js';
import type { ResolvedAlias } from '../catalog.js';
import { Errors, gatewayError, type GatewayError } from '../errors.js';
import type { InferenceContext } from '../request-context.js';
import type { Usage } from '../usage.js';
import type { SettlementJournal, PendingOp } from './journal.js';
import type { IntentMark } from './intent-log.js';
import { minuteOf, periodOf, worstCase, type WorstCase } from './pricing.js';
import { settleInputOf, type SettlementFacts } from './settlement-record.js';
import { capRefusal } from './cap-refusal.js';
import { CreditLeases } from './credit-leases.js';
import { Slots } from '../../util/slots.js';

/**
 * The money path of one request: before the provider is called, one atomic
 * hold of the worst-case cost (the 402 / 429 prechecks); when the response
 * ends, one atomic settlement with the actual usage (the rest of the hold is
 * released), or a release when nothing was delivered. Fails closed: a hold
 * that cannot be placed refuses the request (503 credits_unavailable). A
 * settlement that cannot be written is journaled and retried until applied.
 */
export interface BillingEvents {
  settled(info: { requestId: string; charged: number; uncovered: number; estimated: boolean }): void;
  failed(what: string, err: unknown): void;
  /** A hold this process placed (not a replay of one already placed). */
  holdOpened?(amount: number): void;
  /** How an admitted request got its hold: moved out of a credit lease, or placed directly. */
  admitted?(via: 'lease' | 'direct'): void;
  /** A hold nobody claimed, released after the grace period. */
  unclaimedReleased?(amount: number): void;
  /**
   * What became of a settlement or release: applied at once, journaled (the
   * store was unreachable), retried from the journal and applied, or failed
   * (never applicable).
   */
  operation?(op: PendingOp['op'], result: 'applied' | 'journaled' | 'retried' | 'failed'): void;
}

/**
 * The other gateway instances, as far as credit leases go: `recall` asks every
 * instance (this one included) to give its lease of a tenant back.
 */
export interface LeasePeers {
  recall(tenantId: string): Promise<void>;
}

const NO_PEERS: LeasePeers = { recall: async () => {} };

/** How long a refused admission waits for other instances to give their leases back before it asks again. */
const RECALL_WAIT_MS = 50;
const RECALL_POLL_MS = 5;

export interface Admitted {
  readonly held: number;
  /**
   * Admitted from this tenant's credit lease without waiting for the store: either
   * committed inside it (`lease`), or its hold moved out of it, which the response
   * processing must see confirmed (Billing.confirmation) before the request goes on.
   */
  readonly leased: boolean;
  /**
   * The lease the request is committed in (it has no hold of its own): a response
   * processing in another process moves it out before the request goes on (Billing.claim).
   */
  readonly lease: string | null;
}

export type AdmitResult = { ok: true; admitted: Admitted } | { ok: false; error: GatewayError; retryAfter?: number };

/** How an exchange ended, as far as billing is concerned. */
export interface Finished {
  readonly principal: Principal;
  /** null: the request never got as far as a priced body (its hold is released). */
  readonly ctx: InferenceContext | null;
  readonly requestId: string;
  /** null: nothing was delivered and no usage is known (release the hold). */
  readonly usage: Usage | null;
  readonly startedAt: number;
}

export class Billing {
  private prices: Readonly<Record<string, Price>>;
  /**
   * The price of each alias assignment as it was when requests were admitted:
   * a request admitted before a reload is settled at the price it was held at
   * (its ctx keeps the ResolvedAlias of the catalogue it was admitted under).
   */
  private readonly priceAtAdmission = new WeakMap<ResolvedAlias, Price>();
  private retrying = false;
  /** Holds this process placed that no response processing has claimed yet. */
  private readonly unclaimed = new Map<string, { readonly tenantId: string; readonly timer: NodeJS.Timeout; readonly amount: number }>();
  /** Holds this process keeps alive (request id → tenant): their leases are renewed until settled or released. */
  private readonly live = new Map<string, string>();
  /** Settlements and releases under way (a stop waits for them); in slots, not a Set (util/slots.ts says why). */
  private readonly finishing = new Slots<Promise<void>>();
  /** Holds admitted from a lease, until the response processing takes their confirmation. */
  private readonly confirming = new Map<string, Promise<GatewayError | null>>();
  /** Credit set aside per busy tenant, admitted against without a store round trip (billing.creditLease). */
  private readonly leases: CreditLeases;
  /** Settlements due once the answer that finished them has left, started together. */
  private readonly afterTurn: AfterTurn;

  constructor(
    private readonly ledger: Ledger,
    private cfg: Config['billing'],
    private readonly journal: SettlementJournal,
    private readonly events: BillingEvents,
    private readonly now: () => number = Date.now,
    /** This instance, recorded with every hold it places or claims. */
    private readonly owner: string = 'local',
    private readonly peers: LeasePeers = NO_PEERS,
  ) {
    this.prices = cfg.prices;
    this.afterTurn = new AfterTurn(ledger.together ? (run) => ledger.together!(run) : undefined);
    this.leases = new CreditLeases(
      ledger,
      () => ({ lease: this.cfg.creditLease, creditCheck: this.cfg.creditCheck, holdTtlSeconds: this.cfg.holdTtlSeconds, holdLeaseSeconds: this.cfg.holdLeaseSeconds }),
      owner,
      now,
      { failed: (what, err) => events.failed(what, err) },
    );
  }

  /**
   * A reloaded configuration: new requests are held and settled with these
   * settings; requests admitted under the catalogue before keep its prices.
   */
  reconfigure(cfg: Config['billing'], catalog: Iterable<ResolvedAlias>): void {
    for (const r of catalog) {
      const p = cfg.prices[r.internalModel];
      if (p) this.priceAtAdmission.set(r, p);
    }
    this.cfg = cfg;
    this.prices = cfg.prices;
  }

  private priceOf(ctx: InferenceContext): Price {
    const p = this.priceAtAdmission.get(ctx.resolved) ?? this.prices[ctx.resolved.internalModel];
    if (!p) throw new Error('no price for a configured model'); // prevented by config validation
    return p;
  }

  /**
   * The 402 / 429 prechecks: one atomic hold of the worst case, moved out of this
   * tenant's credit lease when it has room (no store round trip), placed directly otherwise.
   */
  async admit(principal: Principal, ctx: InferenceContext, requestId: string): Promise<AdmitResult> {
    const now = this.now();
    const worst = worstCase(this.priceOf(ctx), ctx, ctx.promptBytes, ctx.messageCount);
    const rl = this.cfg.rateLimits;
    const limited = rl.requestsPerMinute !== null || rl.tokensPerMinute !== null;
    const leasing = this.cfg.creditLease.enabled && !limited;
    const tenantId = principal.tenantId;
    const taken = leasing ? this.leases.take(tenantId, requestId, principal.keyId, worst.cost, periodOf(now)) : null;
    if (taken) {
      const moved = taken.moved;
      if (moved) this.confirming.set(requestId, moved.then((outcome) => this.confirmMove(outcome, principal, ctx, requestId, worst, now)));
      this.opened(tenantId, requestId, worst.cost);
      this.events.admitted?.('lease');
      return { ok: true, admitted: { held: worst.cost, leased: true, lease: moved ? null : taken.leaseId } };
    }
    let outcome = await this.reserve(principal, requestId, worst, limited, now);
    if (outcome === null) return { ok: false, error: gatewayError(Errors.creditsUnavailable) };
    if (!outcome.ok && outcome.reason !== 'rate_limit_exceeded' && this.leases.holds(tenantId)) {
      // This instance's own lease may be what stands in the way: give it back and ask once more.
      await this.leases.retire(tenantId);
      outcome = await this.reserve(principal, requestId, worst, limited, now);
      if (outcome === null) return { ok: false, error: gatewayError(Errors.creditsUnavailable) };
    }
    // Instances share their settings: with leases off here, no instance holds one to recall.
    if (!outcome.ok && outcome.reason !== 'rate_limit_exceeded' && this.cfg.creditLease.enabled && (await this.recallOthers(tenantId, now))) {
      outcome = await this.reserve(principal, requestId, worst, limited, now);
      if (outcome === null) return { ok: false, error: gatewayError(Errors.creditsUnavailable) };
    }
    if (outcome.ok) {
      if (!outcome.replay) {
        this.opened(tenantId, requestId, worst.cost);
        this.events.admitted?.('direct');
        if (leasing) this.leases.grow(tenantId, worst.cost, periodOf(now));
      }
      return { ok: true, admitted: { held: worst.cost, leased: false, lease: null } };
    }
    switch (outcome.reason) {
      case 'insufficient_credit':
        return { ok: false, error: this.insufficient() };
      case 'spend_cap_exceeded':
        return { ok: false, error: await this.capAnswer(tenantId, ctx, worst, now) };
      case 'rate_limit_exceeded':
        return { ok: false, error: gatewayError(Errors.rateLimitExceeded), retryAfter: 60 - Math.floor((now % 60_000) / 1000) };
    }
  }

  /**
   * What a lease admission's move came to. The lease was gone (released, reaped, or stale
   * after a cap change): the request is held directly instead, so it gets the
   * answer a direct hold gives (a refusal then comes from the response processing, the
   * one case where it does not come from ext_authz). The store could not say, or the
   * request id was taken: 503, the money path fails closed.
   */
  private async confirmMove(outcome: MoveOutcome | 'failed', principal: Principal, ctx: InferenceContext, requestId: string, worst: WorstCase, now: number): Promise<GatewayError | null> {
    if (outcome === 'moved') return null;
    if (outcome !== 'no_lease' && outcome !== 'stale') return gatewayError(Errors.creditsUnavailable);
    const direct = await this.reserve(principal, requestId, worst, false, now);
    if (direct === null) return gatewayError(Errors.creditsUnavailable);
    if (direct.ok) return null;
    return direct.reason === 'insufficient_credit' ? this.insufficient() : direct.reason === 'spend_cap_exceeded' ? this.capAnswer(principal.tenantId, ctx, worst, now) : gatewayError(Errors.rateLimitExceeded);
  }

  /**
   * A direct hold was refused while other instances hold credit leases of this tenant:
   * they are asked to give them back (a broadcast), and this waits up to RECALL_WAIT_MS
   * for the tenant's leased credit to fall. True when it fell (ask the store again).
   */
  private async recallOthers(tenantId: string, now: number): Promise<boolean> {
    const leasedNow = async () => (await this.ledger.account(tenantId, periodOf(now))).leased;
    try {
      const before = await leasedNow();
      if (before === 0) return false;
      await this.peers.recall(tenantId);
      for (let waited = 0; waited < RECALL_WAIT_MS; waited += RECALL_POLL_MS) {
        await new Promise((r) => setTimeout(r, RECALL_POLL_MS));
        if ((await leasedNow()) < before) return true;
      }
    } catch (err) {
      this.events.failed('recall', err); // the refusal stands
    }
    return false;
  }

  /** Another instance asked for this tenant's credit lease back (a direct hold there was refused). */
  recallReceived(tenantId: string): Promise<void> {
    return this.leases.retire(tenantId);
  }

  private insufficient(): GatewayError {
    return gatewayError(Errors.insufficientCredit, { message: `The credit balance does not cover this request. Top up at ${this.cfg.topUpUrl}` });
  }

  /** A hold this process placed: kept alive until settled, released if no response processing claims it. */
  private opened(tenantId: string, requestId: string, amount: number): void {
    this.live.set(requestId, tenantId);
    this.events.holdOpened?.(amount);
    this.releaseIfNeverClaimed(tenantId, requestId, amount);
  }

  /** One direct hold in the store; null: the store could not be reached (refuse, 503). */
  private async reserve(principal: Principal, requestId: string, worst: WorstCase, limited: boolean, now: number): Promise<ReserveOutcome | null> {
    const rl = this.cfg.rateLimits;
    try {
      return await this.ledger.reserve({
        tenantId: principal.tenantId,
        requestId,
        keyId: principal.keyId,
        amount: worst.cost,
        tokens: worst.promptTokens + worst.completionTokens,
        creditCheck: this.cfg.creditCheck,
        period: periodOf(now),
        minute: minuteOf(now),
        limits: limited
          ? {
              requestsPerMinute: rl.requestsPerMinute,
              tokensPerMinute: rl.tokensPerMinute,
              scopeId: rl.per === 'key' && principal.keyId ? principal.keyId : principal.tenantId,
            }
          : null,
        holdTtlSeconds: this.cfg.holdTtlSeconds,
        leaseSeconds: this.cfg.holdLeaseSeconds,
        owner: this.owner,
        now,
      });
    } catch (err) {
      if (err instanceof StoreUnavailableError) {
        // The hold may still be written (a command sent before an outage can run after it):
        // journal its release, so a refused request never keeps credit held.
        this.journalOnly({ op: 'release', tenantId: principal.tenantId, requestId });
        return null;
      }
      throw err;
    }
  }

  /** Why the cap refused: reached (429), or only this request's worst case does not fit (400, what to lower). */
  private async capAnswer(tenantId: string, ctx: InferenceContext, worst: WorstCase, now: number): Promise<GatewayError> {
    let remaining: number;
    try {
      const a = await this.ledger.account(tenantId, periodOf(now));
      if (a.cap === null) return gatewayError(Errors.spendCapExceeded); // cleared since: the plain answer
      remaining = a.cap - a.spent - a.held - a.leased; // what the hold script counts
    } catch {
      return gatewayError(Errors.spendCapExceeded); // the refusal stands; only the detail is missing
    }
    return capRefusal(remaining, this.priceOf(ctx), ctx, worst, this.cfg.currency);
  }

  /**
   * A hold is placed by ext_authz; the response processing (ext_proc) claims it
   * when the request reaches it and then settles or releases it. A request
   * whose client left between the two never gets there: its hold is released
   * after a grace period instead of staying locked until it expires. When both
   * filters reach this same process (a sidecar beside its Envoy) the claim is
   * local and costs nothing; otherwise it is recorded in the store.
   */
  private releaseIfNeverClaimed(tenantId: string, requestId: string, amount: number): void {
    const timer = setTimeout(() => this.releaseUnclaimed(requestId), this.cfg.claimGraceSeconds * 1000);
    timer.unref();
    this.unclaimed.set(requestId, { tenantId, timer, amount });
  }

  private releaseUnclaimed(requestId: string): Promise<void> {
    const u = this.unclaimed.get(requestId);
    if (!u) return Promise.resolve();
    clearTimeout(u.timer);
    this.unclaimed.delete(requestId);
    this.confirming.delete(requestId);
    this.events.unclaimedReleased?.(u.amount);
    // Claimed elsewhere (another instance's ext_proc), that instance keeps the lease from now on.
    this.live.delete(requestId);
    return this.ledger.releaseUnclaimed(u.tenantId, requestId).then(
      (outcome) => {
        // A commitment nobody moved out of its lease (the tombstone keeps anyone from doing so
        // now) goes back to the lease; one moved out has left it in the store already.
        if (outcome !== 'tombstone' || !this.leases.releaseLocal(requestId)) this.leases.forgetCommitment(requestId);
      },
      () => {
        // The store is down: the lease runs out and a reaper releases the hold. A commitment
        // stays out of what the lease admits.
        this.leases.forgetCommitment(requestId);
      },
    );
  }

  /**
   * Envoy gave up on this request's check (its ext_authz timeout passed) after the hold
   * was placed: Envoy refused the request, so no response processing will claim the hold.
   * Released now rather than after the claim grace period; a hold this process did not
   * place, or one already claimed, is left alone.
   */
  releaseAbandoned(requestId: string): Promise<void> {
    return this.releaseUnclaimed(requestId);
  }

  /**
   * The response processing has taken this request over (it will settle or release it).
   * Returns false when another process placed the hold (its holdOpened fired there,
   * and its unclaimedReleased fires there after the grace period). `leased`: the gate
   * admitted it from a credit lease; when that was another process, whether the store
   * has its hold is the answer of this claim (see confirmation). `lease`: it was committed
   * inside that process's lease: this process moves it out into a claimed hold of its own.
   */
  claim(tenantId: string, requestId: string, leased = false, lease: LeaseCommitment | null = null): boolean {
    const local = this.unclaimed.get(requestId);
    if (local) {
      clearTimeout(local.timer);
      this.unclaimed.delete(requestId);
      return true;
    }
    this.live.set(requestId, tenantId);
    const claimed = lease ? this.claimFromLease(tenantId, requestId, lease) : this.ledger.claim(tenantId, requestId, this.owner);
    claimed.catch((err: unknown) => this.events.failed('claim', err));
    if (leased || lease) {
      const unavailable = gatewayError(Errors.creditsUnavailable);
      this.confirming.set(requestId, claimed.then((open) => (open ? null : unavailable), () => unavailable));
    }
    return false;
  }

  /** A request committed in another process's lease: its hold moved out (or, moved there already, claimed). */
  private async claimFromLease(tenantId: string, requestId: string, lease: LeaseCommitment): Promise<boolean> {
    const now = this.now();
    const outcome = await this.ledger.moveFromLease({
      tenantId, leaseId: lease.id, requestId, keyId: null, amount: lease.amount, period: periodOf(now),
      holdTtlSeconds: this.cfg.holdTtlSeconds, leaseSeconds: this.cfg.holdLeaseSeconds, owner: this.owner, now, admitted: true, claim: true,
    });
    if (outcome === 'moved') return true;
    return outcome === 'exists' && this.ledger.claim(tenantId, requestId, this.owner);
  }

  /**
   * For a hold admitted from a credit lease, once claimed: resolves null when the store
   * has the request's open hold, or the refusal to answer instead (503 credits_unavailable
   * when it does not or cannot say: the money path fails closed). null: a hold placed
   * directly, known to be in the store already.
   */
  confirmation(requestId: string): Promise<GatewayError | null> | null {
    const c = this.confirming.get(requestId);
    if (!c) return null;
    this.confirming.delete(requestId);
    return c;
  }

  /**
   * Settles or releases; never throws (a failed write is journaled and retried). The
   * settlement waits until the answer that called this has left (one turn of the event
   * loop): the caller does not wait for the ledger, and the ledger's work does not
   * compete with the answer for the CPU (measured in docs/benchmark.md). A shared
   * store's settlement is first recorded in the journal's intents, before this returns
   * and so before that answer leaves: a crash in between cannot leave a delivered answer
   * unbilled (the next start retries what was recorded and never carried out). Where the
   * intent cannot be written, the store's command is written now instead, still before
   * the answer leaves. An in-process ledger dies with the process: it needs no intent.
   */
  finish(f: Finished): Promise<void> {
    this.confirming.delete(f.requestId);
    const settling = this.ledger.inProcess ? this.afterTurn.run(() => this.settleOrRelease(f)) : this.settleOrRelease(f);
    // The callback runs in a later microtask, so `slot` below is assigned by then.
    const done = settling.finally(() => {
      this.live.delete(f.requestId);
      this.finishing.delete(slot, done);
    });
    const slot = this.finishing.add(done);
    return done;
  }

  /** Holds this process keeps alive right now, and settlements under way (a stop waits for both to reach 0). */
  get inFlight(): { readonly holds: number; readonly unclaimed: number; readonly finishing: number } {
    return { holds: this.live.size, unclaimed: this.unclaimed.size, finishing: this.finishing.size };
  }

  /** Resolves when every settlement or release under way has been written (or journaled). */
  async settled(): Promise<void> {
    while (this.finishing.size) {
      const under: Promise<void>[] = [];
      this.finishing.forEach((p) => under.push(p));
      await Promise.all(under);
    }
  }

  /** A stop: holds no response processing claimed are released now instead of after the grace period. */
  async releaseAllUnclaimed(): Promise<void> {
    await Promise.all([...this.unclaimed.keys()].map((rid) => this.releaseUnclaimed(rid)));
  }

  /** A stop: no credit lease is opened again, and every lease is given back to the tenants' available balance. */
  stopLeasing(): Promise<void> {
    return this.leases.stop();
  }

  /** Micro-units this process has set aside in credit leases and not yet moved into request holds. */
  get leased(): number {
    return this.leases.leased;
  }

  /**
   * Renews the lease of every hold this process keeps alive (one script per
   * tenant). A renewal that fails (the store is down) is tried again next time;
   * if the store stays away longer than the lease, the hold may be reaped and the
   * settlement is then taken from the available balance (see Ledger.settle).
   */
  async renewLeases(): Promise<number> {
    const byTenant = new Map<string, string[]>();
    for (const [rid, tenant] of this.live) {
      const list = byTenant.get(tenant);
      if (list) list.push(rid);
      else byTenant.set(tenant, [rid]);
    }
    let n = 0;
    for (const [tenant, rids] of byTenant) {
      try {
        n += await this.ledger.renewLeases(tenant, rids, this.now(), this.cfg.holdLeaseSeconds);
      } catch (err) {
        this.events.failed('renew', err);
      }
    }
    await this.leases.renew();
    return n;
  }

  private async settleOrRelease(f: Finished): Promise<void> {
    if (!f.usage || !f.ctx) return this.releaseHold(f);
    let facts: SettlementFacts;
    try {
      facts = this.factsOf(f, f.ctx, f.usage);
    } catch (err) {
      return this.unsettleable(f, err);
    }
    // Recorded first (a shared store), written to the store once the answer has left.
    const mark = this.ledger.inProcess ? null : this.intend(facts);
    return mark === null ? this.settleNow(f, facts, null) : this.afterTurn.run(() => this.settleNow(f, facts, mark));
  }

  /** A commitment inside a lease goes back to it in memory; a hold is released in the store. */
  private async releaseHold(f: Finished): Promise<void> {
    if (!this.leases.releaseLocal(f.requestId)) await this.apply({ op: 'release', tenantId: f.principal.tenantId, requestId: f.requestId });
  }

  /** Not a figure the ledger could ever take: record the failure, free the hold. */
  private unsettleable(f: Finished, err: unknown): Promise<void> {
    this.events.failed('settle', err);
    this.events.operation?.('settle', 'failed');
    return this.releaseHold(f);
  }

  /** Writes the settlement (its intent, if recorded, is then carried out). */
  private async settleNow(f: Finished, facts: SettlementFacts, mark: IntentMark | null): Promise<void> {
    let input: SettleInput;
    try {
      input = settleInputOf(facts);
    } catch (err) {
      if (mark !== null) this.journal.carriedOut(mark);
      return this.unsettleable(f, err);
    }
    if ((await this.apply({ op: 'settle', input })) && mark !== null) this.journal.carriedOut(mark);
  }

  /** The settlement recorded before its answer leaves; null when it could not be (it is then written to the store at once). */
  private intend(facts: SettlementFacts): IntentMark | null {
    try {
      return this.journal.intend(facts);
    } catch (err) {
      this.events.failed('journal', err);
      return null;
    }
  }

  /** What the settlement is computed from: only lookups, no arithmetic (this runs before the answer leaves). */
  private factsOf(f: Finished, ctx: InferenceContext, usage: Usage): SettlementFacts {
    return {
      requestId: f.requestId,
      tenantId: f.principal.tenantId,
      keyId: f.principal.keyId,
      startedAt: f.startedAt,
      now: this.now(),
      alias: ctx.resolved.alias,
      internalModel: ctx.resolved.internalModel,
      promptTokens: usage.promptTokens,
      completionTokens: usage.completionTokens,
      totalTokens: usage.totalTokens,
      estimated: usage.estimated,
      requestCount: ctx.requestCount,
      price: this.priceOf(ctx),
      creditCheck: this.cfg.creditCheck,
      lease: this.leases.commitment(f.requestId),
    };
  }

  private async run(op: PendingOp): Promise<void> {
    if (op.op === 'release') {
      await this.ledger.release(op.tenantId, op.requestId);
      return;
    }
    const r = await this.ledger.settle(op.input);
    if (op.input.lease) this.leases.settled(op.input.requestId, r.leaseStale);
    if (r.applied) {
      this.events.settled({ requestId: op.input.requestId, charged: r.charged, uncovered: r.uncovered, estimated: op.input.usage.estimated });
    }
  }

  /** Applies, or journals for a retry; false only when it is in neither the store nor the journal. */
  private async apply(op: PendingOp): Promise<boolean> {
    try {
      await this.run(op);
      this.events.operation?.(op.op, 'applied');
      return true;
    } catch (err) {
      this.events.failed(op.op, err);
      // Only an unreachable store is worth retrying; an input the ledger refuses never
      // will be (its hold is released by the reaper when it expires).
      if (err instanceof StoreUnavailableError) {
        const kept = this.journalOnly(op);
        if (op.op === 'settle') this.leases.journaled(op.input.requestId);
        return kept;
      }
      this.events.operation?.(op.op, 'failed');
      if (op.op === 'settle') this.leases.settled(op.input.requestId, undefined); // never applicable: the lease keeps nothing for it
      return true;
    }
  }

  private journalOnly(op: PendingOp): boolean {
    try {
      this.journal.append(op);
      this.events.operation?.(op.op, 'journaled');
      return true;
    } catch (journalErr) {
      this.events.failed('journal', journalErr);
      return false;
    }
  }

  /** Applies journaled operations; keeps those that still fail. Returns how many are left. */
  async retryPending(): Promise<number> {
    if (this.retrying) return -1;
    this.retrying = true;
    try {
      const pending = this.journal.pending();
      if (!pending.length) return 0;
      const left: PendingOp[] = [];
      for (let i = 0; i < pending.length; i++) {
        const op = pending[i]!;
        try {
          await this.run(op);
          this.events.operation?.(op.op, 'retried');
        } catch (err) {
          left.push(op);
          // The store is not taking them: the rest wait for the next round instead of each
          // failing on its own (a timeout apiece). One written but short of replicas is
          // different: the rest are written too, as far as the master goes (each waits out
          // the replicas on the connection kept for that, never the admissions').
          if (err instanceof StoreUnavailableError && !(err instanceof NotReplicatedError)) {
            left.push(...pending.slice(i + 1));
            break;
          }
        }
      }
      // Operations journaled while these were retried stay behind them.
      const appended = this.journal.pending().slice(pending.length);
      this.journal.rewrite([...left, ...appended]);
      return left.length + appended.length;
    } finally {
      this.retrying = false;
    }
  }

  /** Releases holds whose lease ran out (their owner died) or whose ttl passed. */
  async reap(): Promise<number> {
    let n = 0;
    for (const tenant of await this.ledger.tenantsWithHolds()) n += await this.ledger.reapExpired(tenant, this.now());
    return n;
  }
}

import { admitBody, bodyEndpointOf, type AdmissionPolicy } from './admission.js';
import type { AuthRequest, Authorizer } from './auth/authorize.js';
import type { Principal } from './auth/principal.js';
import type { Billing } from './billing/service.js';
import type { AdmissionCache } from './admission-cache.js';
import { AccountErrors, Errors, gatewayError, type GatewayError } from './errors.js';
import { pathOnly } from './auth/routes.js';

const isCredits = (path: string, prefix: string): boolean => {
  const p = pathOnly(path);
  return p === `${prefix}/credits` || p.startsWith(`${prefix}/credits/`);
};

/**
 * The front gate of every request (run by ext_authz, before anything reaches
 * the provider): who is calling, and for chat and embeddings whether the body
 * is acceptable and the worst-case cost can be held. A refusal costs nothing.
 */
export interface GateRequest extends AuthRequest {
  readonly method: string;
  /** Headers the client sent (pseudo-headers and the ones Envoy sets itself not counted). */
  readonly headerCount: number;
  /** Their size: names and values, in bytes. */
  readonly headerBytes: number;
  readonly body: Buffer | null;
  readonly requestId: string;
}

export type GateOutcome =
  | { readonly ok: false; readonly error: GatewayError; readonly retryAfter?: number }
  | {
      readonly ok: true;
      readonly principal: Principal | null;
      /** Set for chat/embeddings: how the response will flow and what is held. */
      readonly inference: {
        readonly stream: boolean;
        readonly held: number;
        /** The hold came out of a credit lease and is confirmed by the response processing (Billing.confirmation). */
        readonly leased: boolean;
        /** The credit lease the request is committed in (Admitted.lease). */
        readonly lease: string | null;
        /** Size of the re-serialised body ext_proc will send up (its content-length). */
        readonly upstreamBytes: number;
      } | null;
    };

/** Request-header bytes a client may send (Envoy's own limit is 4 KiB above: room for the gateway's headers). */
export const MAX_CLIENT_HEADER_BYTES = 60 * 1024;

export class Gate {
  private readonly policyNow: () => AdmissionPolicy;

  constructor(
    private readonly authorizer: Authorizer,
    private readonly billing: Billing,
    /** The policy, or where to read the current one (it changes on a configuration reload). */
    policy: AdmissionPolicy | (() => AdmissionPolicy),
    private readonly apiPrefix: string,
    private readonly maxRequestHeaders: number,
    private readonly admissions?: AdmissionCache,
    private readonly account: { readonly billingEnabled: boolean } = { billingEnabled: false },
  ) {
    this.policyNow = typeof policy === 'function' ? policy : () => policy;
  }

  /**
   * The key check, on headers alone, before any body is buffered: the same
   * 401/403 (and 431) answers as check(), so a refused caller never gets a
   * large body held in memory. check() runs in full afterwards. (Envoy asks
   * only for a body larger than its connection buffer or of unknown size.)
   */
  async authenticate(req: Omit<GateRequest, 'body' | 'method' | 'requestId'>): Promise<GateOutcome> {
    if (this.headersOverLimit(req)) return this.tooManyHeaders();
    const auth = await this.authorizer.authorize(req);
    return auth.ok ? { ok: true, principal: auth.principal, inference: null } : auth;
  }

  async check(req: GateRequest): Promise<GateOutcome> {
    // Before anything is held: the gateway's own headers must fit on top of the client's.
    if (this.headersOverLimit(req)) return this.tooManyHeaders();
    const auth = await this.authorizer.authorize(req);
    if (!auth.ok) return auth;
    const policy = this.policyNow();
    // Billing off: every /credits* request of an authenticated caller is the 404 of endpoint rule 11, whatever its body.
    if (auth.route === 'account' && !this.account.billingEnabled && isCredits(req.path, this.apiPrefix)) {
      return { ok: false, error: gatewayError(Errors.billingNotEnabled) };
    }
    // Envoy hands over up to limits.maxResponseBytes of body (its buffer limit covers both
    // directions); anything above the request limit is refused here, on every path.
    if (req.body && req.body.length > policy.maxRequestBytes) {
      return { ok: false, error: gatewayError(auth.route === 'account' ? AccountErrors.requestTooLarge : Errors.payloadTooLarge) };
    }
    const endpoint = auth.principal ? bodyEndpointOf(req.path, this.apiPrefix) : null;
    if (!endpoint || !auth.principal) return { ok: true, principal: auth.principal, inference: null };

    const admission = admitBody(endpoint, req.method, req.body, policy);
    if (!admission.ok) return admission;
    const held = await this.billing.admit(auth.principal, admission.ctx, req.requestId);
    if (!held.ok) return held;
    if (req.body) this.admissions?.put(req.requestId, req.body, admission, { principal: auth.principal, ...held.admitted });
    return {
      ok: true,
      principal: auth.principal,
      inference: { stream: admission.ctx.stream, held: held.admitted.held, leased: held.admitted.leased, lease: held.admitted.lease, upstreamBytes: admission.upstreamBody.length },
    };
  }

  private headersOverLimit(req: Pick<GateRequest, 'headerCount' | 'headerBytes'>): boolean {
    return req.headerCount > this.maxRequestHeaders || req.headerBytes > MAX_CLIENT_HEADER_BYTES;
  }

  private tooManyHeaders(): GateOutcome {
    const message = `Too many or too large request headers; at most ${this.maxRequestHeaders} headers of ${MAX_CLIENT_HEADER_BYTES / 1024} KiB in all are accepted.`;
    return { ok: false, error: gatewayError(Errors.tooManyHeaders, { message }) };
  }
}

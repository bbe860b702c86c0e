import { admitBody, bodyEndpointOf, type AdmissionPolicy } from './admission.js';
import type { AuthRequest, Authorizer } from './auth/authorize.js';
import type { Principal } from './auth/principal.js';
import type { Billing } from './billing/service.js';
import type { AdmissionCache } from './admission-cache.js';
import { Errors, gatewayError, type GatewayError } from './errors.js';

/**
 * The front gate of every request (run by ext_authz, before anything reaches
 * the provider): who is calling, and for chat and embeddings whether the body
 * is acceptable and the worst-case cost can be held. A refusal costs nothing.
 */
export interface GateRequest extends AuthRequest {
  readonly method: string;
  readonly body: Buffer | null;
  readonly requestId: string;
}

export type GateOutcome =
  | { readonly ok: false; readonly error: GatewayError; readonly retryAfter?: number }
  | {
      readonly ok: true;
      readonly principal: Principal | null;
      /** Set for chat/embeddings: how the response will flow and what is held. */
      readonly inference: { readonly stream: boolean; readonly held: number } | null;
    };

export class Gate {
  private readonly policyNow: () => AdmissionPolicy;

  constructor(
    private readonly authorizer: Authorizer,
    private readonly billing: Billing,
    /** The policy, or where to read the current one (it changes on a configuration reload). */
    policy: AdmissionPolicy | (() => AdmissionPolicy),
    private readonly apiPrefix: string,
    private readonly admissions?: AdmissionCache,
  ) {
    this.policyNow = typeof policy === 'function' ? policy : () => policy;
  }

  async check(req: GateRequest): Promise<GateOutcome> {
    const auth = await this.authorizer.authorize(req);
    if (!auth.ok) return auth;
    const policy = this.policyNow();
    // Envoy hands over up to limits.maxResponseBytes of body (its buffer limit covers both
    // directions); anything above the request limit is refused here, on every path.
    if (req.body && req.body.length > policy.maxRequestBytes) return { ok: false, error: gatewayError(Errors.payloadTooLarge) };
    const endpoint = auth.principal ? bodyEndpointOf(req.path, this.apiPrefix) : null;
    if (!endpoint || !auth.principal) return { ok: true, principal: auth.principal, inference: null };

    const admission = admitBody(endpoint, req.method, req.body, policy);
    if (!admission.ok) return admission;
    const held = await this.billing.admit(auth.principal, admission.ctx, req.requestId);
    if (!held.ok) return held;
    if (req.body) this.admissions?.put(req.requestId, req.body, admission);
    return { ok: true, principal: auth.principal, inference: { stream: admission.ctx.stream, held: held.admitted.held } };
  }
}

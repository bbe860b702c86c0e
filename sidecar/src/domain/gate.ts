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
  constructor(
    private readonly authorizer: Authorizer,
    private readonly billing: Billing,
    private readonly policy: AdmissionPolicy,
    private readonly apiPrefix: string,
    private readonly admissions?: AdmissionCache,
    private readonly account: { readonly billingEnabled: boolean } = { billingEnabled: false },
  ) {}

  async check(req: GateRequest): Promise<GateOutcome> {
    const auth = await this.authorizer.authorize(req);
    if (!auth.ok) return auth;
    // Billing off: every /credits* request of an authenticated caller is the 404 of endpoint rule 11, whatever its body.
    if (auth.route === 'account' && !this.account.billingEnabled && isCredits(req.path, this.apiPrefix)) {
      return { ok: false, error: gatewayError(Errors.billingNotEnabled) };
    }
    // Envoy hands over up to limits.maxResponseBytes of body (its buffer limit covers both
    // directions); anything above the request limit is refused here, on every path.
    if (req.body && req.body.length > this.policy.maxRequestBytes) {
      return { ok: false, error: gatewayError(auth.route === 'account' ? AccountErrors.requestTooLarge : Errors.payloadTooLarge) };
    }
    const endpoint = auth.principal ? bodyEndpointOf(req.path, this.apiPrefix) : null;
    if (!endpoint || !auth.principal) return { ok: true, principal: auth.principal, inference: null };

    const admission = admitBody(endpoint, req.method, req.body, this.policy);
    if (!admission.ok) return admission;
    const held = await this.billing.admit(auth.principal, admission.ctx, req.requestId);
    if (!held.ok) return held;
    if (req.body) this.admissions?.put(req.requestId, req.body, admission);
    return { ok: true, principal: auth.principal, inference: { stream: admission.ctx.stream, held: held.admitted.held } };
  }
}

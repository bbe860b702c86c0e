import { randomBytes } from 'node:crypto';
import Fastify, { type FastifyInstance } from 'fastify';

/**
 * A payment simulator (as the project ships a model simulator): it tokenises
 * test card numbers and charges tokens, so every path of a top-up can be
 * tried without a real provider. It never keeps or logs a card number: a
 * token remembers only the brand, the last four digits and how the card
 * behaves.
 *
 * Test cards (any future expiry, any CVC):
 *   4242 4242 4242 4242   Visa, succeeds
 *   5555 5555 5555 4444   Mastercard, succeeds
 *   4000 0000 0000 0002   Visa, declined (card_declined)
 *   4000 0000 0000 9995   Visa, declined (insufficient_funds)
 *   4000 0000 0000 0119   Visa, fails transiently: the first attempt of each
 *                         idempotency key answers 503, a retry succeeds
 * Any other number is refused at tokenisation (400 invalid_number).
 *
 * API: POST /v1/tokens {number} → 201 {id, brand, last4}; GET /v1/tokens/:id;
 * POST /v1/charges {token, amount, currency, description} with an
 * Idempotency-Key header → 200 {id, status: "succeeded", amount, currency},
 * 402 {error: {code}} (declined) or 503 (transient); a charge resent with the
 * same key answers the first result. GET /v1/charges lists charges (newest first).
 * POST /v1/tokens/:id/behaviour {behaviour: succeed|decline|insufficient_funds|transient}
 * changes how a token behaves from now on (a saved card that starts declining).
 */
type Behaviour = 'succeed' | 'decline' | 'insufficient_funds' | 'transient';

const CARDS: Record<string, { brand: string; behaviour: Behaviour }> = {
  '4242424242424242': { brand: 'visa', behaviour: 'succeed' },
  '5555555555554444': { brand: 'mastercard', behaviour: 'succeed' },
  '4000000000000002': { brand: 'visa', behaviour: 'decline' },
  '4000000000009995': { brand: 'visa', behaviour: 'insufficient_funds' },
  '4000000000000119': { brand: 'visa', behaviour: 'transient' },
};

interface Token {
  readonly id: string;
  readonly brand: string;
  readonly last4: string;
  readonly behaviour: Behaviour;
}

interface Charge {
  readonly id: string;
  readonly token: string;
  readonly amount: number;
  readonly currency: string;
  readonly status: 'succeeded' | 'declined';
  readonly created: string;
}

export function createPaymentSimulator(): FastifyInstance {
  const app = Fastify({ logger: false, bodyLimit: 16 * 1024 });
  const tokens = new Map<string, Token>();
  const charges: Charge[] = [];
  /** idempotency key → the answer given the first time. */
  const answered = new Map<string, { status: number; body: unknown; fingerprint: string }>();
  const attempts = new Map<string, number>();
  const id = (p: string) => `${p}_${randomBytes(12).toString('hex')}`;

  app.get('/healthz', async () => ({ status: 'ok' }));

  app.post<{ Body: { number?: unknown } }>('/v1/tokens', async (req, reply) => {
    const number = typeof req.body?.number === 'string' ? req.body.number.replace(/[\s-]/g, '') : '';
    const card = CARDS[number];
    if (!card) return reply.code(400).send({ error: { code: 'invalid_number', message: 'Not a test card of this simulator.' } });
    const t: Token = { id: id('tok'), brand: card.brand, last4: number.slice(-4), behaviour: card.behaviour };
    tokens.set(t.id, t);
    return reply.code(201).send({ id: t.id, brand: t.brand, last4: t.last4 });
  });

  app.get<{ Params: { id: string } }>('/v1/tokens/:id', async (req, reply) => {
    const t = tokens.get(req.params.id);
    if (!t) return reply.code(404).send({ error: { code: 'unknown_token' } });
    return { id: t.id, brand: t.brand, last4: t.last4 };
  });

  app.post<{ Body: { token?: unknown; amount?: unknown; currency?: unknown } }>('/v1/charges', async (req, reply) => {
    const key = req.headers['idempotency-key'];
    const { token, amount, currency } = req.body ?? {};
    if (typeof key !== 'string' || !key) return reply.code(400).send({ error: { code: 'idempotency_key_required' } });
    if (typeof token !== 'string' || typeof amount !== 'number' || !Number.isSafeInteger(amount) || amount <= 0 || typeof currency !== 'string') {
      return reply.code(400).send({ error: { code: 'invalid_request' } });
    }
    const fingerprint = `${token}|${amount}|${currency}`;
    const first = answered.get(key);
    if (first) {
      if (first.fingerprint !== fingerprint) return reply.code(409).send({ error: { code: 'idempotency_key_reused' } });
      return reply.code(first.status).send(first.body);
    }
    const t = tokens.get(token);
    if (!t) return reply.code(404).send({ error: { code: 'unknown_token' } });
    if (t.behaviour === 'transient') {
      const n = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, n);
      if (n === 1) return reply.code(503).send({ error: { code: 'processing_error' } });
    }
    const declined = t.behaviour === 'decline' || t.behaviour === 'insufficient_funds';
    const charge: Charge = { id: id('ch'), token, amount, currency, status: declined ? 'declined' : 'succeeded', created: new Date().toISOString() };
    charges.push(charge);
    const answer = declined
      ? { status: 402, body: { error: { code: t.behaviour === 'decline' ? 'card_declined' : 'insufficient_funds', charge: charge.id } } }
      : { status: 200, body: { id: charge.id, status: 'succeeded', amount, currency } };
    answered.set(key, { ...answer, fingerprint });
    return reply.code(answer.status).send(answer.body);
  });

  // Operator control (the card a customer saved starts declining, say): change how a token behaves.
  app.post<{ Params: { id: string }; Body: { behaviour?: unknown } }>('/v1/tokens/:id/behaviour', async (req, reply) => {
    const t = tokens.get(req.params.id);
    const b = req.body?.behaviour;
    if (!t) return reply.code(404).send({ error: { code: 'unknown_token' } });
    if (b !== 'succeed' && b !== 'decline' && b !== 'insufficient_funds' && b !== 'transient') return reply.code(400).send({ error: { code: 'invalid_behaviour' } });
    tokens.set(t.id, { ...t, behaviour: b });
    return { id: t.id, brand: t.brand, last4: t.last4, behaviour: b };
  });

  app.get('/v1/charges', async () => ({ data: [...charges].reverse() }));
  return app;
}

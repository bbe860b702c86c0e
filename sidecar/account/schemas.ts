import { z } from 'zod';
import { ROLES } from '../src/store/account-contract.js';
import { isValidAllowlistEntry } from '../src/domain/auth/ip-allowlist.js';

/**
 * Request schemas of the account service: they validate every request body
 * and query, and the OpenAPI document is generated from them.
 */
const personId = z.string().regex(/^[A-Za-z0-9_.@:-]{1,128}$/);
const role = z.enum(ROLES);

export const AddMemberBody = z.object({ person_id: personId, role: role.default('member') }).strict();
export const ChangeRoleBody = z.object({ role }).strict();

/** Scopes a person may put on a key: `ai` only today (no wildcard exists). */
export const KEY_SCOPES = ['ai'] as const;
export const CreateKeyBody = z
  .object({
    name: z.string().max(200).default(''),
    scopes: z.array(z.enum(KEY_SCOPES)).min(1).max(8).default(['ai']),
    allowed_ips: z
      .array(z.string().max(64).refine(isValidAllowlistEntry, { message: 'not an address or CIDR range' }))
      .min(1)
      .max(100)
      .nullable()
      .default(null),
  })
  .strict();

const microUnits = z.number().int();
const tierOrAmount = {
  tier: z.string().min(1).max(40).optional(),
  amount: microUnits.positive().optional(),
};
const oneOf = (b: { tier?: string | undefined; amount?: number | undefined }) => (b.tier === undefined) !== (b.amount === undefined);
const ONE_OF = { message: 'give exactly one of tier and amount', path: ['tier'] };

export const TopupBody = z
  .object({
    ...tierOrAmount,
    /** A card token from the payment provider; without it the saved card is charged. */
    payment_method: z.string().min(1).max(200).optional(),
    save_card: z.boolean().default(false),
  })
  .strict()
  .refine(oneOf, ONE_OF);

export const AutoTopupBody = z
  .object({ threshold: microUnits.min(0), ...tierOrAmount })
  .strict()
  .refine(oneOf, ONE_OF);

export const SpendCapBody = z.object({ spend_cap: microUnits.min(0).nullable() }).strict();

export const TransactionsQuery = z
  .object({
    limit: z.coerce.number().int().min(1).optional(),
    cursor: z.string().max(200).optional(),
  })
  .strict();

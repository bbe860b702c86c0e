import { API_PREFIX } from '../src/api-prefix.js';

/** Every path the account service serves (a known path with another method is a 405, anything else a 404). */
const p = (template: string) => ({ template, pattern: new RegExp(`^${API_PREFIX}${template.replace(/\{[a-z_]+\}/g, '[^/]+')}$`) });

export const KNOWN_PATHS = [
  p('/accounts/me'),
  p('/accounts/members'),
  p('/accounts/members/{person_id}'),
  p('/accounts/keys'),
  p('/accounts/keys/{key_id}'),
  p('/credits'),
  p('/credits/tiers'),
  p('/credits/transactions'),
  p('/credits/topup'),
  p('/credits/auto-topup'),
  p('/credits/spend-cap'),
];

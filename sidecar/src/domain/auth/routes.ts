import { API_PREFIX } from '../../api-prefix.js';

/**
 * Route classes decide which credentials a path takes:
 * - inference: /models, /chat/completions, /embeddings, /usage, /whoami
 * - account:   /credits*, /accounts* (served by the account service)
 * - outside:   paths outside the prefix (a key there gets 403)
 * Unknown paths under the prefix are route misses answered by Envoy before
 * any authorisation; if one ever reaches us it is treated as inference.
 */
export type RouteClass = 'inference' | 'account' | 'outside';

export function pathOnly(path: string): string {
  const q = path.indexOf('?');
  return q < 0 ? path : path.slice(0, q);
}

export function classifyPath(rawPath: string, prefix = API_PREFIX): RouteClass {
  const path = pathOnly(rawPath);
  if (!path.startsWith(`${prefix}/`)) return 'outside';
  const rest = path.slice(prefix.length);
  if (isUnder(rest, '/credits') || isUnder(rest, '/accounts')) return 'account';
  return 'inference';
}

const isUnder = (rest: string, base: string): boolean => rest === base || rest.startsWith(`${base}/`);

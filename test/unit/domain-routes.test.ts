/** Route classes: which credentials a path takes. */
import { describe, expect, it } from 'vitest';
import { classifyPath, pathOnly } from '../../sidecar/src/domain/auth/routes.js';

describe('classifyPath', () => {
  it.each([
    ['/v1/models', 'inference'], ['/v1/chat/completions', 'inference'], ['/v1/embeddings?x=1', 'inference'],
    ['/v1/whoami', 'inference'], ['/v1/usage', 'inference'], ['/v1/anything', 'inference'],
    ['/v1/credits', 'account'], ['/v1/credits/topup', 'account'], ['/v1/accounts', 'account'], ['/v1/accounts/me?y', 'account'],
    ['/v1/creditsx', 'inference'], ['/v1/accountsfoo', 'inference'],
    ['/v1', 'outside'], ['/v1?x', 'outside'], ['/v10/models', 'outside'], ['/healthz', 'outside'], ['/', 'outside'],
  ])('%s → %s', (path, cls) => {
    expect(classifyPath(path)).toBe(cls);
  });

  it('honours another prefix', () => {
    expect(classifyPath('/api/credits', '/api')).toBe('account');
    expect(classifyPath('/v1/models', '/api')).toBe('outside');
  });

  it('pathOnly drops the query', () => {
    expect(pathOnly('/v1/models?a=1?b')).toBe('/v1/models');
    expect(pathOnly('/v1/models')).toBe('/v1/models');
  });
});

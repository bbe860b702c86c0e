/** IpAllowlist: v4/v6 addresses and ranges, mapped addresses, peers that never match. */
import { describe, expect, it } from 'vitest';
import { IpAllowlist, isValidAllowlistEntry } from '../../sidecar/src/domain/auth/ip-allowlist.js';

describe('IpAllowlist', () => {
  const list = new IpAllowlist(['198.51.100.5', '10.0.0.0/8', '2001:db8::7', 'fd00::/16']);

  it.each([
    ['198.51.100.5', true], ['198.51.100.6', false],
    ['10.255.1.2', true], ['11.0.0.1', false],
    ['2001:db8::7', true], ['2001:db8::8', false],
    ['fd00:1::1', true], ['fd01::1', false],
    ['::ffff:198.51.100.5', true], ['::FFFF:10.1.2.3', true], ['::ffff:192.0.2.1', false],
    ['[2001:db8::7]', true], ['fe80::1%eth0', false],
  ])('%s → %s', (peer, allowed) => {
    expect(list.allows(peer)).toBe(allowed);
  });

  it('a missing or non-address peer never matches', () => {
    const all = new IpAllowlist(['0.0.0.0/0', '::/0']);
    for (const peer of [null, undefined, '', 'localhost', '1.2.3.4:80', 'not an ip']) expect(all.allows(peer)).toBe(false);
    expect(all.allows('8.8.8.8')).toBe(true);
  });

  it('strips brackets and zone ids from the peer', () => {
    const ll = new IpAllowlist(['fe80::/10']);
    expect(ll.allows('fe80::1%eth0')).toBe(true);
    expect(ll.allows('[fe80::2%25]')).toBe(true);
  });

  it('an empty list allows nobody', () => {
    expect(new IpAllowlist([]).allows('127.0.0.1')).toBe(false);
  });

  it('rejects invalid entries', () => {
    for (const bad of ['10.0.0.0/33', '2001:db8::/129', '1.2.3', '10.0.0.0/8/1', '10.0.0.0/x', 'host.example', '']) {
      expect(isValidAllowlistEntry(bad)).toBe(false);
      expect(() => new IpAllowlist([bad])).toThrow();
    }
    for (const good of ['1.2.3.4', '1.2.3.0/24', '::1', '2001:db8::/32', ' 10.0.0.1 ']) expect(isValidAllowlistEntry(good)).toBe(true);
  });
});

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
    // the same mapped addresses in hex form: 198.51.100.5 = c633:6405, 192.0.2.1 = c000:201
    ['::ffff:c633:6405', true], ['::ffff:c000:201', false],
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
    // the zone goes before the address is checked: an empty or odd zone id,
    // which is no IP address to node:net, still leaves the address
    expect(ll.allows('fe80::1%')).toBe(true);
    expect(ll.allows('fe80::1%a%b')).toBe(true);
    expect(ll.allows('fec0::1%eth0')).toBe(false); // fe80::/10 ends at febf
  });

  it('strips brackets only when they enclose the whole peer', () => {
    const all = new IpAllowlist(['0.0.0.0/0', '::/0']);
    expect(all.allows('[10.0.0.1]')).toBe(true);
    expect(all.allows('[::1]')).toBe(true);
    for (const peer of ['[::1', '::1]', 'x10.0.0.1]', '[10.0.0.1x', '[]']) expect(all.allows(peer), peer).toBe(false);
  });

  it('an empty list allows nobody', () => {
    expect(new IpAllowlist([]).allows('127.0.0.1')).toBe(false);
  });

  it('rejects invalid entries, without echoing them', () => {
    const bads = ['10.0.0.0/33', '2001:db8::/129', '1.2.3', '10.0.0.0/8/1', '10.0.0.0/x', 'host.example', '',
      '10.0.0.0/24x', '10.0.0.0/x24', '10.0.0.0/ 24', '10.0.0.0/', '10.0.0.0/0024'];
    for (const bad of bads) {
      expect(isValidAllowlistEntry(bad), bad).toBe(false);
      expect(() => new IpAllowlist(['10.0.0.1', bad]), bad).toThrow(/^invalid allowed_ips entry$/);
    }
    for (const good of ['1.2.3.4', '1.2.3.0/24', '::1', '2001:db8::/32', ' 10.0.0.1 ', '10.0.0.1/32', '::1/128', '0.0.0.0/0', '::/0']) {
      expect(isValidAllowlistEntry(good), good).toBe(true);
    }
  });

  it('a range ends at its prefix: /32 and /128 are one address, /0 is every one', () => {
    const one = new IpAllowlist(['10.0.0.1/32', '2001:db8::7/128']);
    expect([one.allows('10.0.0.1'), one.allows('10.0.0.2'), one.allows('2001:db8::7'), one.allows('2001:db8::6')]).toEqual([true, false, true, false]);
    const every = new IpAllowlist(['0.0.0.0/0']);
    expect([every.allows('255.255.255.255'), every.allows('2001:db8::1')]).toEqual([true, false]);
  });
});

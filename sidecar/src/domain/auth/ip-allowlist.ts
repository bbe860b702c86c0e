import { BlockList, isIP } from 'node:net';

/**
 * A key's allowed_ips: single addresses and CIDR ranges, IPv4 and IPv6.
 * Only the direct TCP peer is ever checked; a missing peer never matches.
 */
export class IpAllowlist {
  private readonly list = new BlockList();

  constructor(entries: readonly string[]) {
    for (const e of entries) {
      const parsed = parseEntry(e);
      if (!parsed) throw new Error('invalid allowed_ips entry');
      if (parsed.prefix === null) this.list.addAddress(parsed.address, parsed.family);
      else this.list.addSubnet(parsed.address, parsed.prefix, parsed.family);
    }
  }

  allows(peer: string | null | undefined): boolean {
    if (!peer) return false;
    const addr = normalisePeer(peer);
    const family = isIP(addr);
    if (family === 0) return false;
    // An IPv4 client seen through a dual-stack socket (::ffff:a.b.c.d, or its
    // hex form ::ffff:c633:6405) matches IPv4 entries: BlockList does that.
    return this.list.check(addr, family === 4 ? 'ipv4' : 'ipv6');
  }
}

interface Entry { address: string; prefix: number | null; family: 'ipv4' | 'ipv6' }

function parseEntry(raw: string): Entry | null {
  const [address = '', prefixText, extra] = raw.trim().split('/');
  if (extra !== undefined) return null;
  const v = isIP(address);
  if (v === 0) return null;
  const family = v === 4 ? 'ipv4' : 'ipv6';
  if (prefixText === undefined) return { address, prefix: null, family };
  if (!/^\d{1,3}$/.test(prefixText)) return null;
  const prefix = Number(prefixText);
  if (prefix > (v === 4 ? 32 : 128)) return null;
  return { address, prefix, family };
}

export function isValidAllowlistEntry(raw: string): boolean {
  return parseEntry(raw) !== null;
}

function normalisePeer(peer: string): string {
  // Strip brackets and zone ids ("[fe80::1%eth0]").
  let p = peer.startsWith('[') && peer.endsWith(']') ? peer.slice(1, -1) : peer;
  const zone = p.indexOf('%');
  if (zone >= 0) p = p.slice(0, zone);
  return p;
}

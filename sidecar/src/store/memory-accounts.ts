import { keepsAnOwner, type AccountStore, type AutoTopup, type CreditTier, type IdempotencyRecord, type Member, type SavedCard } from './account-contract.js';

/** The account records in this process (the embedded default; the account service then runs in the sidecar's process). */
export function createMemoryAccountStore(): AccountStore {
  const members = new Map<string, Map<string, Member | 'removed'>>();
  const keyPeople = new Map<string, string>();
  const cards = new Map<string, SavedCard>();
  const autos = new Map<string, AutoTopup>();
  const idem = new Map<string, IdempotencyRecord>();
  let tiers: CreditTier[] | null = null;
  const windows = new Map<string, number>();
  const ws = (id: string) => {
    let m = members.get(id);
    if (!m) members.set(id, (m = new Map()));
    return m;
  };
  const active = (id: string) => [...ws(id).values()].filter((m): m is Member => m !== 'removed');
  const clone = <T>(v: T): T => structuredClone(v);
  return {
    async getMember(w, p) {
      const m = ws(w).get(p);
      return m === undefined ? null : clone(m);
    },
    async listMembers(w) {
      return clone(active(w));
    },
    async addMember(w, m) {
      const cur = ws(w).get(m.personId);
      if (cur !== undefined && cur !== 'removed') return false;
      ws(w).set(m.personId, clone(m));
      return true;
    },
    async putMember(w, m) {
      ws(w).set(m.personId, clone(m));
    },
    async setRole(w, p, role) {
      const cur = ws(w).get(p);
      if (cur === undefined || cur === 'removed') return 'not_found';
      if (!keepsAnOwner(active(w), p, role)) return 'last_owner';
      ws(w).set(p, { ...cur, role });
      return 'ok';
    },
    async removeMember(w, p) {
      const cur = ws(w).get(p);
      if (cur === undefined || cur === 'removed') return 'not_found';
      if (!keepsAnOwner(active(w), p, null)) return 'last_owner';
      ws(w).set(p, 'removed');
      return 'ok';
    },
    async setKeyPerson(k, p) {
      keyPeople.set(k, p);
    },
    async getKeyPerson(k) {
      return keyPeople.get(k) ?? null;
    },
    async getCard(w) {
      return clone(cards.get(w) ?? null);
    },
    async setCard(w, c) {
      if (c) cards.set(w, clone(c));
      else cards.delete(w);
    },
    async getAutoTopup(w) {
      return clone(autos.get(w) ?? null);
    },
    async setAutoTopup(w, a) {
      if (a) autos.set(w, clone(a));
      else autos.delete(w);
    },
    async getTiers() {
      return clone(tiers);
    },
    async setTiers(t) {
      tiers = clone(t);
    },
    async claimIdempotency(w, key, rec) {
      const id = `${w}\u0000${key}`;
      const cur = idem.get(id);
      if (cur) return clone(cur);
      idem.set(id, clone(rec));
      return null;
    },
    async finishIdempotency(w, key, rec) {
      idem.set(`${w}\u0000${key}`, clone(rec));
    },
    async dropIdempotency(w, key) {
      idem.delete(`${w}\u0000${key}`);
    },
    async countInWindow(w, counter, minute) {
      for (const k of windows.keys()) if (Number(k.slice(0, k.indexOf('|'))) < minute - 1) windows.delete(k);
      const id = `${minute}|${w}|${counter}`;
      const n = (windows.get(id) ?? 0) + 1;
      windows.set(id, n);
      return n;
    },
    async close() {},
  };
}

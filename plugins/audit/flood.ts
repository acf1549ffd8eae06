import { addressHolder } from '../../core/addresses.js';
import type { NewAuditEntry } from './store.js';

/** The limits of anonymous entries (audit.anonymous_*). */
export interface FloodLimits {
  /** Entries of their own per address and minute for anonymous writes (audit.anonymous_entries_per_minute). */
  entriesPerMinute: number;
  /** Addresses followed one by one in a minute; past them, anonymous writes are counted under `*` (audit.anonymous_addresses_per_minute). */
  addressesPerMinute: number;
}

const MINUTE = 60_000;

/** One address's minute. */
interface Allowance {
  /** Entries of their own so far (the first refusal included). */
  own: number;
  /** The minute's first refusal had its entry. */
  refusalWritten: boolean;
}

/**
 * Anonymous writes (no principal: a failed login, a join, a reset request) are what anyone can
 * send as fast as the network carries them: one client added about 1 000 entries a second. So per
 * source address (an IPv6 /64) and minute:
 * - a refused one (status 400 or above) has an entry of its own when it is the minute's first;
 * - one that went through has an entry of its own while the address has fewer than
 *   `entriesPerMinute` entries that minute (and one written with its write, {@link reserve},
 *   takes that place before its answer is known);
 * - every other one is counted into one entry per address, route and status, with `count`, written
 *   when the minute is over ({@link due}; at shutdown too).
 * Past `addressesPerMinute` addresses in a minute, the others are counted under the address `*`.
 */
export class AnonymousFlood {
  private minute = -1;
  private readonly allowances = new Map<string, Allowance>();
  private readonly counted = new Map<string, NewAuditEntry>();

  constructor(private readonly limits: FloodLimits) {}

  private allowance(ip: string, at: Date): Allowance | null {
    const minute = Math.floor(at.getTime() / MINUTE);
    if (minute !== this.minute) {
      this.minute = minute;
      this.allowances.clear();
    }
    const key = addressHolder(ip);
    let allowance = this.allowances.get(key);
    if (!allowance) {
      if (this.allowances.size >= this.limits.addressesPerMinute) return null;
      allowance = { own: 0, refusalWritten: false };
      this.allowances.set(key, allowance);
    }
    return allowance;
  }

  /**
   * Takes a place for an entry of its own before the answer is known (the entry goes in with the
   * request's write): whether there was one.
   */
  reserve(ip: string, at: Date): boolean {
    const allowance = this.allowance(ip, at);
    if (!allowance || allowance.own >= this.limits.entriesPerMinute) return false;
    allowance.own++;
    return true;
  }

  /** A refused answer of a request whose entry went in with its write (it counts as the minute's refusal). */
  refusedWithEntry(ip: string, at: Date): void {
    const allowance = this.allowance(ip, at);
    if (allowance) allowance.refusalWritten = true;
  }

  /** Whether an answered anonymous write has an entry of its own; when not, it is counted (and written later). */
  admit(entry: NewAuditEntry, at: Date): boolean {
    const allowance = this.allowance(entry.source_ip, at);
    if (allowance) {
      if (entry.status >= 400 && !allowance.refusalWritten) {
        allowance.refusalWritten = true;
        allowance.own++;
        return true;
      }
      if (entry.status < 400 && allowance.own < this.limits.entriesPerMinute) {
        allowance.own++;
        return true;
      }
    }
    const ip = allowance ? entry.source_ip : '*';
    const minute = Math.floor(at.getTime() / MINUTE);
    const key = `${minute}|${ip}|${entry.listener}|${entry.method}|${entry.route}|${entry.status}`;
    const counted = this.counted.get(key);
    if (counted) counted.count++;
    // The first counted request stands for the others: its time, request id and client.
    else this.counted.set(key, { ...entry, source_ip: ip, resource_id: null, count: 1 });
    return false;
  }

  /** The counted entries of minutes that are over (all of them with `all`, at shutdown), taken out. */
  due(now: Date, all = false): NewAuditEntry[] {
    const current = Math.floor(now.getTime() / MINUTE);
    const out: NewAuditEntry[] = [];
    for (const [key, entry] of this.counted) {
      if (all || Number(key.slice(0, key.indexOf('|'))) < current) {
        out.push(entry);
        this.counted.delete(key);
      }
    }
    return out;
  }
}

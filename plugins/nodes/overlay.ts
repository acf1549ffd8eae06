import type { Knex } from 'knex';
import type { Clock } from '../../core/clock.js';
import type { Store } from '../../core/db/store.js';
import { conflict } from '../../core/errors.js';
import { OVERLAY_LEASES } from './migrations.js';

function toInt(ip: string): number {
  return ip.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

function toIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

/** Parses `10.210.0.0/16` into its usable host range; the first host is the control plane's. */
export function parseSubnet(cidr: string): { first: number; last: number; prefix: number; network: string } {
  const m = /^(\d+\.\d+\.\d+\.\d+)\/(\d{1,2})$/.exec(cidr);
  if (!m) throw new Error(`overlay subnet ${cidr} is not an IPv4 CIDR`);
  const prefix = Number(m[2]);
  if (prefix < 8 || prefix > 29) throw new Error(`overlay subnet ${cidr}: the prefix must be between /8 and /29`);
  const size = 2 ** (32 - prefix);
  const network = (toInt(m[1]!) & ~(size - 1)) >>> 0;
  return { first: network + 1, last: network + size - 2, prefix, network: toIp(network) };
}

/**
 * Overlay (WireGuard) addresses: the first host of the subnet belongs to the control plane; the rest
 * are leased to join tokens (a reserved peer) and then to the nodes that joined with them.
 */
export class OverlayAddresses {
  private readonly range: ReturnType<typeof parseSubnet>;
  /**
   * The addresses leased, as this process last read them: read once, then kept up to date with its
   * own reservations, and read again after a release or when another process took the address it
   * chose (a reservation used to read every lease: a fleet of 5 000 made joining quadratic). An
   * address is marked taken before its lease is written, so that reservations running at once in
   * this process choose different ones instead of colliding and reading every lease again.
   */
  private taken: Promise<Set<number>> | null = null;
  /** No address below this one is free, as far as `taken` knows. */
  private lowestFree = 0;

  constructor(
    private readonly store: Store,
    private readonly clock: Clock,
    readonly subnet: string,
  ) {
    this.range = parseSubnet(subnet);
  }

  get controlPlaneAddress(): string {
    return toIp(this.range.first);
  }

  get prefix(): number {
    return this.range.prefix;
  }

  private leases(db: Knex | Knex.Transaction): Promise<Set<number>> {
    if (!this.taken) {
      this.lowestFree = this.range.first + 1;
      const reading = db(OVERLAY_LEASES)
        .select('ip')
        .then((rows: Array<{ ip: string }>) => new Set(rows.map((r) => toInt(r.ip))));
      this.taken = reading;
      // A failed read is not kept: the next reservation reads again.
      reading.catch(() => {
        if (this.taken === reading) this.taken = null;
      });
    }
    return this.taken;
  }

  /** Leases a free address to `holder`, the lowest one unless concurrent reservations collide. */
  async reserve(holder: string, trx?: Knex.Transaction): Promise<string> {
    const db = trx ?? this.store.knex;
    for (let attempt = 0; attempt < 20; attempt++) {
      const taken = await this.leases(db);
      while (taken.has(this.lowestFree)) this.lowestFree++;
      // Each retry skips further ahead, so processes racing for the same address spread out.
      let candidate = this.lowestFree;
      let skip = attempt === 0 ? 0 : Math.floor(Math.random() * (attempt * 4));
      while (candidate <= this.range.last && (taken.has(candidate) || skip-- > 0)) candidate++;
      if (candidate > this.range.last) throw conflict(`The overlay subnet ${this.subnet} has no free address left`);
      taken.add(candidate);
      const ip = toIp(candidate);
      try {
        const inserted = await db(OVERLAY_LEASES).insert({ ip, holder, created_at: this.clock.now().toISOString() }).onConflict('ip').ignore();
        const mine = await db(OVERLAY_LEASES).where({ ip, holder }).first();
        if (mine && inserted !== undefined) return ip;
      } catch (err) {
        taken.delete(candidate);
        this.lowestFree = Math.min(this.lowestFree, candidate);
        throw err;
      }
      // Another process holds it: read the leases again.
      if ((await this.taken) === taken) this.taken = null;
    }
    throw conflict('Could not reserve an overlay address; try again');
  }

  async transfer(ip: string, holder: string, trx?: Knex.Transaction): Promise<void> {
    await (trx ?? this.store.knex)(OVERLAY_LEASES).where({ ip }).update({ holder });
  }

  async release(holder: string, trx?: Knex.Transaction): Promise<number> {
    this.taken = null;
    return (trx ?? this.store.knex)(OVERLAY_LEASES).where({ holder }).delete();
  }
}

/**
 * The fleet's heartbeat cadence, as Nomad sets it: the control plane takes at most
 * `maxPerSecond` heartbeats a second from the whole fleet, so the interval each agent is told in
 * its heartbeat reply is the fleet size ÷ that budget, never below the configured interval (the
 * floor) and never so long that a held task's lease (renewed by heartbeats) runs out in between.
 * Silence is judged in proportion: a node is offline after as many intervals as the configured
 * `offline_after_seconds` is of the configured interval (35 s of 10 s: 3.5 intervals).
 */
export class HeartbeatCadence {
  private fleet = 0;

  constructor(
    private readonly settings: { floorSeconds: number; offlineAfterSeconds: number; maxPerSecond: number; ceilingSeconds: number },
  ) {}

  /** The number of machines that heartbeat (the nodes plugin counts them now and then). */
  setFleet(size: number): void {
    this.fleet = size;
  }

  get fleetSize(): number {
    return this.fleet;
  }

  /** Seconds between one agent's heartbeats, as announced in every heartbeat reply. */
  get intervalSeconds(): number {
    const { floorSeconds, maxPerSecond, ceilingSeconds } = this.settings;
    return Math.max(floorSeconds, Math.min(ceilingSeconds, Math.ceil(this.fleet / maxPerSecond)));
  }

  /** Seconds without a heartbeat after which a node is offline. */
  get offlineAfterSeconds(): number {
    const { floorSeconds, offlineAfterSeconds } = this.settings;
    return Math.max(offlineAfterSeconds, Math.ceil((this.intervalSeconds * offlineAfterSeconds) / floorSeconds));
  }
}

/**
 * Which of a node's empty long-polls is the first of its wait, answered anywhere in the wait rather
 * than in its last eighth (emptyAnswerAfterMs in plugins/agent-internal): a node's first poll since
 * this process started, and its first poll of a wait a heartbeat reply told it that differs from
 * the wait it had. A fleet told a new wait together (it grew past tasks.max_polls_per_second) then
 * spreads over the new wait at once, as a fleet that reconnected together does over its first.
 * Each control-plane process keeps its own record, of the nodes that reach it.
 */
export class PollSpread {
  /** The wait each node asked for in its last poll to this process (ms). */
  private readonly asked = new Map<string, number>();
  /** The wait last told to each node in a heartbeat reply (ms). */
  private readonly told = new Map<string, number>();
  /** Nodes told a wait other than the one they had: their next poll of it is the first. */
  private readonly toldNew = new Set<string>();

  /** A heartbeat reply tells `nodeId` to wait `waitMs`. */
  tell(nodeId: string, waitMs: number): void {
    // What the node had: the wait told before, else the one it polled with (after a restart, the
    // wait another process told it; at first, the agent's default). A node that has not polled
    // here yet will have its first poll since the start.
    const had = this.told.get(nodeId) ?? this.asked.get(nodeId);
    if (had !== undefined && had !== waitMs) this.toldNew.add(nodeId);
    this.told.set(nodeId, waitMs);
  }

  /** Whether this poll (of `askedMs`, as capped) is the node's first since the start or its first of a newly told wait. */
  firstOfItsWait(nodeId: string, askedMs: number): boolean {
    const ofToldWait = askedMs === this.told.get(nodeId);
    const first = !this.asked.has(nodeId) || (ofToldWait && this.toldNew.has(nodeId));
    this.asked.set(nodeId, askedMs);
    if (ofToldWait) this.toldNew.delete(nodeId);
    return first;
  }
}

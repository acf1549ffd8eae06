/**
 * Which of a node's empty long-polls is the first of its wait, answered anywhere in the wait rather
 * than in its last eighth (emptyAnswerAfterMs in plugins/agent-internal): a node's first poll since
 * this process started, and its first poll of the wait a heartbeat reply told it when its polls
 * before had another. A fleet told a new wait together (it grew past tasks.max_polls_per_second)
 * then spreads over the new wait at once, as a fleet that reconnected together does over its first;
 * after a restart, a node that goes on polling with the wait another process told it is not spread
 * twice. Each control-plane process keeps its own record, of the nodes that reach it.
 */
export class PollSpread {
  /** The wait each node asked for in its last poll to this process (ms). */
  private readonly asked = new Map<string, number>();
  /** The wait last told to each node in a heartbeat reply (ms). */
  private readonly told = new Map<string, number>();

  /** A heartbeat reply tells `nodeId` to wait `waitMs`. */
  tell(nodeId: string, waitMs: number): void {
    this.told.set(nodeId, waitMs);
  }

  /** Whether this poll (of `askedMs`, as capped) is the node's first since the start or its first of a newly told wait. */
  firstOfItsWait(nodeId: string, askedMs: number): boolean {
    const before = this.asked.get(nodeId);
    this.asked.set(nodeId, askedMs);
    return before === undefined || (askedMs !== before && askedMs === this.told.get(nodeId));
  }
}

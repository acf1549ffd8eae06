/** One row written through a Repository: which table, which record, what happened to it. */
export interface RecordChange {
  table: string;
  id: string;
  op: 'insert' | 'update' | 'delete';
  /**
   * The row as written (insert, update) or as it was (delete), when the write had it at hand: what
   * the record says of itself once it may be gone (a deleted record's project is read from it).
   */
  row?: Readonly<Record<string, unknown>>;
}

/**
 * The store's change feed: every insert, update and delete a Repository makes is announced here,
 * after the statement ran (inside a transaction that may still roll back, so a change is a hint to
 * look again, never the record itself). Live views (GET /v1/events/stream) follow it; subscribers
 * must be quick and must not throw (a throwing one is skipped).
 */
export class ChangeFeed {
  private readonly subscribers = new Set<(change: RecordChange) => void>();

  subscribe(subscriber: (change: RecordChange) => void): () => void {
    this.subscribers.add(subscriber);
    return () => this.subscribers.delete(subscriber);
  }

  notify(change: RecordChange): void {
    for (const subscriber of this.subscribers) {
      try {
        subscriber(change);
      } catch {
        /* a live view's failure is its own business */
      }
    }
  }
}

import type { Knex } from 'knex';
import type { PreparedTransaction } from '../db/prepared-transaction.js';
import type { Principal } from '../auth/index.js';
import type { ListenerName, RouteDef } from '../plugin.js';

/** What the request pipeline tells observers (metrics, the audit log) about each answered request. */
export interface FinishedRequest {
  listener: ListenerName;
  method: string;
  /** The route that matched (its `path` is the template, `/v1/nodes/{id}`), or null for a 404/405 without one. */
  route: RouteDef | null;
  /** Path parameters as matched (raw strings). */
  params: Record<string, string>;
  status: number;
  durationMs: number;
  /** Who called, once authentication ran (null before it, for anonymous callers and agents). */
  principal: Principal | null;
  /** The agent's node id on `agent` routes. */
  agentNodeId: string | null;
  ip: string;
  /** The answer's X-Request-Id: the client's when it sent a well-formed one, so two requests may share it. */
  requestId: string;
  /**
   * An object the server made for this request, the same in every call about it (the request's
   * state): what an observer or companion keeps of a request between its calls is keyed by it,
   * never by the request id, which the client chooses.
   */
  token: object;
  userAgent: string;
  /**
   * `data` of a JSON success body (e.g. the id of what a POST created). Observers take ids from it;
   * it may hold a once-shown secret, so it is never to be stored or logged whole.
   */
  data: unknown;
  /** A change the handler made committed (core/db/write-scope.ts). */
  committed: boolean;
  /** A change may have committed: the connection was lost during its COMMIT (core/db/write-scope.ts). */
  uncertain: boolean;
  /** Companions ({@link WriteCompanion}) whose record committed with one of the request's writes. */
  recordedWith: readonly string[];
}

/**
 * A record of a request that goes in with the first write its handler commits, in the same
 * transaction (both or neither): the audit entry (plugins/audit). Before the handler runs,
 * `wants` says whether the request has one; `write` writes it inside the write's transaction, with
 * `status` the route's success status (the answer is not known yet: the observers learn it). Both
 * get the same `token` as the observers' call about the request.
 */
export interface WriteCompanion {
  wants(request: FinishedRequest): boolean;
  write(request: FinishedRequest, trx: Knex.Transaction): Promise<void>;
  /**
   * The same record through prepared statements (core/db/writes.ts `store.writes.run(…, tx)`), in a
   * transaction opened without knex. When every companion of a request has it, a write made on its
   * own carries the record that way (a fraction of the work of knex's transaction).
   */
  writePrepared?(request: FinishedRequest, tx: PreparedTransaction): Promise<void>;
}

export type RequestObserver = (request: FinishedRequest) => void | Promise<void>;

/**
 * The pipeline's seam for cross-cutting observers: each registered observer is called once per
 * answered request, after the answer is decided and before it is sent (an async observer delays
 * the answer: the audit log records a write before its caller learns the outcome). A failing
 * observer is logged by the pipeline and never changes the answer.
 */
export class RequestObservers {
  private readonly observers: Array<{ name: string; observe: RequestObserver }> = [];

  private readonly companions: Array<{ name: string; companion: WriteCompanion }> = [];

  add(name: string, observe: RequestObserver): void {
    this.observers.push({ name, observe });
  }

  /** Registers a record written with a request's first committed write ({@link WriteCompanion}). */
  accompany(name: string, companion: WriteCompanion): void {
    this.companions.push({ name, companion });
  }

  /** The companions that have a record of `request`. */
  companionsFor(request: FinishedRequest): Array<{ name: string; companion: WriteCompanion }> {
    return this.companions.length ? this.companions.filter(({ companion }) => companion.wants(request)) : [];
  }

  async finished(request: FinishedRequest, onError: (name: string, err: Error) => void): Promise<void> {
    for (const { name, observe } of this.observers) {
      try {
        // A synchronous observer (the metrics) costs no turn of the event loop.
        const pending = observe(request);
        if (pending) await pending;
      } catch (err) {
        onError(name, err as Error);
      }
    }
  }
}

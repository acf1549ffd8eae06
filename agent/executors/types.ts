import type { Logger } from '../../core/log.js';

export interface ExecutorContext {
  payload: Record<string, any>;
  log: Logger;
  dataDir: string;
  /** The agent's own log file (JSON lines). */
  logFile: string;
  /** Runs once the task's result has been reported (stop, reboot, restart after update). */
  after(action: () => void | Promise<void>): void;
  /** GET a path of the control API over mutual TLS, as bytes. */
  download(pathAndQuery: string): Promise<{ status: number; body: Buffer; headers: Record<string, string | string[] | undefined> }>;
  /** Stops heartbeats and waits for one in flight, so none lands after the result (stop, reboot). */
  quiesce(): Promise<void>;
  /** Asks the agent to refresh its view of OS updates in the next heartbeat. */
  setPendingUpdates(count: number | null): void;
}

/** Runs one task kind; what it returns is the task's output, what it throws fails the task. */
export type Executor = (ctx: ExecutorContext) => Promise<unknown>;

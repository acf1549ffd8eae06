// The driver's error, in a module of its own: what runs without the SDK (k3s.ts, on every agent)
// imports it from here, so an agent loads @kubernetes/client-node only with its first driver call.

/** A driver failure: what failed, then the API server's own reason; `statusCode` is the API server's HTTP status when there was one. */
export class KubeDriverError extends Error {
  constructor(
    message: string,
    readonly statusCode?: number,
  ) {
    super(message);
    this.name = 'KubeDriverError';
  }
}

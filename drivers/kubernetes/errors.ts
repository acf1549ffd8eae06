// Apart from client.ts so that what needs only the error (k3s.ts, and through it the kubernetes
// plugin's constants) does not load @kubernetes/client-node: the control plane starts without it.

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

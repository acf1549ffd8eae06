/**
 * A busybox command for a swarm task that runs `script`, then `main` (by default a long sleep) and
 * stops at once on SIGTERM. A shell (or sleep, or httpd) as a container's PID 1 ignores SIGTERM
 * unless it traps it, so without the trap every stop, update, rollback, drain or removal of the task
 * waits out Docker's grace period (10 s) before SIGKILL.
 */
export function stays(script = '', main = 'sleep 3600'): string[] {
  return ['sh', '-c', `trap 'exit 0' TERM; ${script ? `${script}; ` : ''}${main} & wait`];
}

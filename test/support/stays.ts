/**
 * A busybox command for a swarm task that runs `script`, then `main` (by default a long sleep) and
 * stops at once on SIGTERM. A shell (or sleep, or httpd) as a container's PID 1 ignores SIGTERM
 * unless it traps it, so without the trap every stop, update, rollback, drain or removal of the task
 * waits out Docker's grace period (10 s) before SIGKILL.
 */
export function stays(script = '', main = 'sleep 3600'): string[] {
  return ['sh', '-c', `trap 'exit 0' TERM; ${script ? `${script}; ` : ''}${main} & wait`];
}

/**
 * A compose file of one service, `app` (busybox running `command`), that mounts a hangar secret as
 * /run/secrets/db_password and a hangar config as /etc/site.conf.
 */
export function composeWithObjects(image: string, command: string[], names: { secret: string; config: string }): string {
  return `services:
  app:
    image: ${image}
    command: ${JSON.stringify(command)}
    stop_grace_period: 1s
    secrets: [db_password]
    configs:
      - source: site
        target: /etc/site.conf
secrets:
  db_password:
    name: ${names.secret}
configs:
  site:
    name: ${names.config}
`;
}

import path from 'node:path';
import type { TargetProbe } from '../target.js';

/** Runs the docker CLI where the swarm is (this machine, or a lab machine). */
export type DockerRunner = (args: string[]) => Promise<{ code: number | null; stdout: string; stderr: string }>;

/** The probes both swarm targets read the same way, through the docker CLI of the swarm's manager. */
export function swarmSpecProbes(docker: DockerRunner): Pick<TargetProbe, 'runningReplicaIds' | 'workloadEnv' | 'workloadMounts'> {
  const inspect = async <T>(name: string, field: string): Promise<T> => {
    const res = await docker(['service', 'inspect', '--format', `{{json ${field}}}`, name]);
    if (res.code !== 0) throw new Error(`docker service inspect ${name}: ${res.stderr.trim()}`);
    return JSON.parse(res.stdout) as T;
  };
  return {
    async runningReplicaIds(name) {
      const res = await docker(['service', 'ps', '--no-trunc', '--filter', 'desired-state=running', '--format', '{{.ID}} {{.CurrentState}}', name]);
      if (res.code !== 0) throw new Error(`docker service ps ${name}: ${res.stderr.trim()}`);
      return res.stdout
        .split('\n')
        .map((line) => line.trim().split(' '))
        .filter(([id, state]) => id && state === 'Running')
        .map(([id]) => id!);
    },
    async workloadEnv(name) {
      const env = (await inspect<string[] | null>(name, '.Spec.TaskTemplate.ContainerSpec.Env')) ?? [];
      return Object.fromEntries(env.map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]));
    },
    async workloadMounts(name) {
      type Ref = { File?: { Name?: string }; SecretName?: string; ConfigName?: string };
      const secrets = (await inspect<Ref[] | null>(name, '.Spec.TaskTemplate.ContainerSpec.Secrets')) ?? [];
      const configs = (await inspect<Ref[] | null>(name, '.Spec.TaskTemplate.ContainerSpec.Configs')) ?? [];
      // The engine mounts a secret's relative file name under /run/secrets, a config's under /.
      const at = (base: string, file: string | undefined) => (file && path.posix.isAbsolute(file) ? file : path.posix.join(base, file ?? ''));
      return [
        ...secrets.map((r) => ({ kind: 'secret' as const, name: r.SecretName!, path: at('/run/secrets', r.File?.Name) })),
        ...configs.map((r) => ({ kind: 'config' as const, name: r.ConfigName!, path: at('/', r.File?.Name) })),
      ];
    },
  };
}

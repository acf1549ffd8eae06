import type { Plugin, Driver } from '../core/plugin.js';

/** Built-in plugins by name; anything else in `plugins:` is a module path. */
export const builtinPlugins: Record<string, () => Promise<{ default: Plugin }>> = {
  system: () => import('./system/index.js'),
  iam: () => import('./iam/index.js'),
  projects: () => import('./projects/index.js'),
  login: () => import('./login/index.js'),
  nodes: () => import('./nodes/index.js'),
  'agent-internal': () => import('./agent-internal/index.js'),
  'ssh-profiles': () => import('./ssh-profiles/index.js'),
  provisioning: () => import('./provisioning/index.js'),
  swarms: () => import('./swarms/index.js'),
  kubernetes: () => import('./kubernetes/index.js'),
  volumes: () => import('./volumes/index.js'),
  secrets: () => import('./secrets/index.js'),
  compute: () => import('./compute/index.js'),
  services: () => import('./services/index.js'),
  s3: () => import('./s3/index.js'),
  backups: () => import('./backups/index.js'),
  alerts: () => import('./alerts/index.js'),
  gateway: () => import('./gateway/index.js'),
  tags: () => import('./tags/index.js'),
  cleanup: () => import('./cleanup/index.js'),
  metrics: () => import('./metrics/index.js'),
  audit: () => import('./audit/index.js'),
  events: () => import('./events/index.js'),
  dashboard: () => import('./dashboard/index.js'),
  notifications: () => import('./notifications/index.js'),
};

/** Built-in drivers by name; anything else in `drivers:` is a module path. swarm and k8s are orchestrator backends (core/clusters/backend.ts). */
export const builtinDrivers: Record<string, () => Promise<{ default: Driver }>> = {
  ssh: () => import('../drivers/ssh/index.js') as Promise<{ default: Driver }>,
  swarm: () => import('../drivers/swarm/backend.js') as Promise<{ default: Driver }>,
  k8s: () => import('../drivers/kubernetes/backend.js') as Promise<{ default: Driver }>,
};

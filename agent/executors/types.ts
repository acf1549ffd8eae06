// The executor contract is core's (core/clusters/backend.ts), so a backend's own executors (the k3s
// installs in drivers/kubernetes/k3s-executors.ts) are written against it without importing the agent.
export type {
  AgentExecutorContext as ExecutorContext,
  AgentExecutor as Executor,
  ExecutorEntry,
  KindExecutor,
} from '../../core/clusters/backend.js';
export { executorFor } from '../../core/clusters/backend.js';

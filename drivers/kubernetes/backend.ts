import { defineBackend } from '../../core/clusters/backend.js';
import { K8S_BACKEND_KINDS } from './membership-calls.js';

/**
 * The k8s backend's control-plane half: its membership task kinds, how bundle parts are addressed
 * (a manifest's Service is reached by its own name in the cluster), and that a volume is staged
 * once per cluster (a PersistentVolume and its claim, through the server node).
 */
export default defineBackend({
  name: 'k8s',
  noun: 'cluster',
  taskKinds: K8S_BACKEND_KINDS,
  componentAddress: (_bundle, component) => component,
  settings: () => ({}),
  volumeStaging: 'cluster',
});

import { defineBackend } from '../../core/clusters/backend.js';
import { K3S_MEMBERSHIP_KINDS } from './membership-calls.js';

/**
 * The k8s backend's control-plane half: its membership task kinds, and how bundle parts are
 * addressed (a manifest's Service is reached by its own name in the cluster).
 */
export default defineBackend({
  name: 'k8s',
  noun: 'cluster',
  taskKinds: K3S_MEMBERSHIP_KINDS,
  componentAddress: (_bundle, component) => component,
  settings: () => ({}),
});

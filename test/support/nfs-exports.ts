import { readFileSync } from 'node:fs';

/** A network NFS exports can be told to name besides the members (`volumes.nfs_export_clients`): TEST-NET-1, nobody's. */
export const OUTSIDE = '192.0.2.0/24';
/** The options the agent writes after each client of an NFS export entry. */
export const NFS_OPTIONS = '(rw,sync,no_subtree_check,no_root_squash)';

/** The export lines of a volume's entry file (its comments left out). */
export const exportLines = (file: string): string[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l && !l.startsWith('#'));

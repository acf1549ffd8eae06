import { expect } from 'chai';
import { BACKUP_STATUS, RESTORE_STATUS, statusReporter } from '../../../agent/executors/backups.js';
import type { ExecutorContext } from '../../../agent/executors/types.js';

/**
 * restic's `--json` status lines as the agent hears them: a backup's (restic 0.14, Debian bookworm's)
 * and a restore's (restic 0.16 and later; 0.14 writes none while it restores, and the agent reads
 * the bytes restic has written from /proc instead: test/integration/backups/commands.test.ts).
 */
describe('agent: restic status lines become the task’s progress', () => {
  const hear = (keys: typeof BACKUP_STATUS | typeof RESTORE_STATUS) => {
    const reported: Array<Record<string, unknown>> = [];
    let heard = 0;
    const ctx = { progress: (value: Record<string, unknown>) => reported.push(value) } as unknown as ExecutorContext;
    return { reported, heard: () => heard, line: statusReporter(ctx, keys, () => heard++) };
  };

  it('a backup’s: bytes and files done of their totals; the status line is not kept, other lines are', () => {
    const { reported, heard, line } = hear(BACKUP_STATUS);
    expect(line('{"message_type":"status","percent_done":0.5,"total_files":3,"files_done":1,"total_bytes":2000,"bytes_done":1000}')).to.equal(false);
    expect(line('{"message_type":"summary","snapshot_id":"75515be6"}')).to.equal(true);
    expect(line('scan finished')).to.equal(true);
    expect(reported).to.deep.equal([{ bytes_done: 1000, bytes_total: 2000, files_done: 1, files_total: 3 }]);
    expect(heard()).to.equal(1);
  });

  it('a restore’s (restic 0.16+): bytes and files restored of their totals; before restic knows the total, null', () => {
    const { reported, heard, line } = hear(RESTORE_STATUS);
    expect(line('{"message_type":"status","seconds_elapsed":1,"percent_done":0.25,"total_files":4,"files_restored":1,"total_bytes":4096,"bytes_restored":1024}')).to.equal(false);
    expect(line('{"message_type":"status","seconds_elapsed":0,"files_restored":0,"bytes_restored":0}')).to.equal(false);
    expect(line('restoring <Snapshot 75515be6 of [/srv/app]> to /srv/.hangar-restore-app')).to.equal(true);
    expect(reported).to.deep.equal([
      { bytes_done: 1024, bytes_total: 4096, files_done: 1, files_total: 4 },
      { bytes_done: 0, bytes_total: null, files_done: 0, files_total: null },
    ]);
    expect(heard()).to.equal(2);
  });

  it('a line that is not JSON but looks like a status line is kept and reports nothing', () => {
    const { reported, heard, line } = hear(RESTORE_STATUS);
    expect(line('{"message_type":"status", broken')).to.equal(true);
    expect(reported).to.deep.equal([]);
    expect(heard()).to.equal(0);
  });
});

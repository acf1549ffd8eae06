import { existsSync } from 'node:fs';
import path from 'node:path';
import { requireService } from '../../support/requirements.js';
import { s3Availability } from '../../support/s3-server.js';
import { Lab } from './lab.js';

/**
 * What an e2e suite on lab machines needs, checked in its before hook: the lab (dockerd, the seal,
 * the image), and as asked the agent executables the control plane deploys (`npm run build`) and the
 * S3 server. Each one missing is a loud skip (a failure under HANGAR_REQUIRE_ALL=1) naming it.
 */
export async function requireLab(ctx: Mocha.Context, needs: { agents?: boolean; s3?: boolean } = {}): Promise<void> {
  const available = await Lab.availability();
  requireService(ctx, available.docker && available.image, available.why ?? 'the machine lab');
  if (needs.agents) requireService(ctx, existsSync(path.resolve('dist/agent/manifest.json')), 'the agent executables (npm run build)');
  if (needs.s3) {
    const s3 = s3Availability();
    requireService(ctx, s3.ok, s3.why);
  }
}

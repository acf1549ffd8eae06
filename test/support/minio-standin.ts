import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { docker } from '../../lab/docker.js';
import { waitFor } from './agents.js';
import { forwardIntoNetns, type NetnsForward } from './netns-forward.js';
import { S3Client } from './s3-client.js';
import { ensureS3BuildFolder } from './s3-server.js';

// The lab's MinIO STAND-IN (lab-minio-standin-image; NOT MinIO: no MinIO image can be pulled here),
// which starts like MinIO, insists on the root credentials, marks its data folder as MinIO does — and
// serves real S3 (SeaweedFS's S3 gateway, built by scripts/s3-build.sh) with the root user and password as keys.
export const STANDIN_IMAGE = 'lab/minio-standin:latest';
const STANDIN_SCRIPT = path.resolve('lab/rootfs/usr/local/sbin/lab-minio-standin-image');

/** Null when the stand-in image is there for the current S3 build (made now when it is not), else what is missing. */
export async function standinImage(): Promise<string | null> {
  if (!spawnSync('sh', ['-c', 'command -v busybox']).stdout.length) return 'busybox on the host (apt-get install busybox-static) to build the MinIO stand-in';
  const build = await ensureS3BuildFolder();
  const built = spawnSync('bash', [STANDIN_SCRIPT, STANDIN_IMAGE], { encoding: 'utf8', env: { ...process.env, HANGAR_S3_BUILD: build } });
  return built.status === 0 ? null : `building ${STANDIN_IMAGE} failed: ${built.stderr}`;
}

/**
 * Runs `use` with an S3 client of a store's S3 API (port 9000 of its running task, reached inside its
 * container's network namespace), once that task answers /minio/health/ready. A task that is
 * replaced meanwhile (a store started while another one on the same folder still stops: the data
 * folder is locked until then and the first task exits) is followed to the next one.
 */
export async function withStoreS3<T>(runtime: string, endpoint: string, secretAccessKey: string, use: (s3: S3Client, socketPath: string) => Promise<T>): Promise<T> {
  let forward: NetnsForward | undefined;
  try {
    await waitFor(
      async () => {
        await forward?.close();
        forward = undefined;
        const container = (await docker(['ps', '-q', '--filter', `label=com.docker.swarm.service.name=${runtime}`])).stdout.trim().split('\n')[0];
        const pid = container ? Number((await docker(['inspect', '--format', '{{.State.Pid}}', container])).stdout.trim()) : 0;
        if (!pid) return false;
        forward = await forwardIntoNetns(pid, 9000).catch(() => undefined);
        if (!forward) return false;
        const probe = new S3Client({ endpoint, socketPath: forward.socketPath, credentials: { accessKeyId: 'hangar', secretAccessKey } });
        return (await probe.request('GET', '/minio/health/ready', { unsigned: true }).catch(() => ({ status: 0 }))).status === 200;
      },
      { timeoutMs: 90_000, intervalMs: 1000, what: `${runtime} answering /minio/health/ready` },
    );
    const socketPath = forward!.socketPath;
    return await use(new S3Client({ endpoint, socketPath, credentials: { accessKeyId: 'hangar', secretAccessKey } }), socketPath);
  } finally {
    await forward?.close();
  }
}

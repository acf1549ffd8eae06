import { createReadStream, existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { definePlugin, defineRoute } from '../../core/plugin.js';
import { notFound, unavailable } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { openApiRoute } from '../../core/openapi.js';
import { fromRoot } from '../../core/paths.js';
import { versionInfo } from '../../core/version.js';
import { AgentBinariesRef, missingExecutable, type AgentBinariesApi, type AgentExecutable } from './api.js';

const DEFAULT_BINARY_DIR = fromRoot('dist', 'agent');

/** How long a store round trip vouches for the store's health. */
const HEALTH_FRESH_MS = 1000;

interface AgentManifest {
  version: string;
  executables: Record<string, { file: string; sha256: string; size: number; compressed?: { file: string; encoding: string; size: number; sha256: string } }>;
}

/** Whether an Accept-Encoding header accepts `encoding` (listed, and not with q=0). */
function acceptsEncoding(header: string | undefined, encoding: string): boolean {
  return (header ?? '').split(',').some((part) => {
    const [name, ...params] = part.trim().split(';');
    return name!.trim().toLowerCase() === encoding && !params.some((p) => /^\s*q\s*=\s*0(\.0*)?\s*$/.test(p));
  });
}

/** The agent executables `npm run build` made, read from their manifest on each request (a rebuild needs no restart). */
class AgentBinaries implements AgentBinariesApi {
  constructor(readonly dir: string) {}

  private manifest(): AgentManifest | null {
    const file = path.join(this.dir, 'manifest.json');
    return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as AgentManifest) : null;
  }

  describe(arch: string): AgentExecutable | null {
    const manifest = this.manifest();
    const entry = manifest?.executables[arch];
    if (!manifest || !entry || !existsSync(path.join(this.dir, entry.file))) return null;
    const packed = entry.compressed && existsSync(path.join(this.dir, entry.compressed.file)) ? entry.compressed : null;
    return {
      version: manifest.version,
      sha256: entry.sha256,
      size: entry.size,
      file: path.join(this.dir, entry.file),
      compressed: packed ? { file: path.join(this.dir, packed.file), encoding: packed.encoding, size: packed.size } : null,
    };
  }
}

/** Health, version, the CA certificate, the agent executables and the OpenAPI documents. */
export default definePlugin({
  name: 'system',
  provides: [AgentBinariesRef],
  description: 'health check, version, CA download, agent executables, OpenAPI document',
  configSchema: Type.Object(
    { agent_binary_dir: Type.Union([Type.String(), Type.Null()], { default: null, description: 'where npm run build put the agent executables (default dist/agent)' }) },
    { additionalProperties: false, default: {} },
  ),
  setup(services) {
    const binaries = new AgentBinaries((services.config.system as { agent_binary_dir: string | null }).agent_binary_dir ?? DEFAULT_BINARY_DIR);
    services.provided.provide(AgentBinariesRef, binaries);
    // A health check answers from a store round trip made in the last second; callers at the same
    // moment share one (a flood of checks is not a flood of queries).
    let answeredAt = -Infinity;
    let asking: Promise<boolean> | null = null;
    const storeAnswers = (): Promise<boolean> => {
      if (performance.now() - answeredAt < HEALTH_FRESH_MS) return Promise.resolve(true);
      asking ??= services.db
        .ping()
        .then(() => {
          answeredAt = performance.now();
          return true;
        })
        .catch(() => false)
        .finally(() => (asking = null));
      return asking;
    };
    // While writes are refused (a full disk, core/db/health.ts), a check tries one small write, at
    // most once a second, to see whether the store takes writes again.
    let probedAt = -Infinity;
    let probing: Promise<boolean> | null = null;
    const storeWrites = (): Promise<boolean> => {
      if (!services.db.health.unwritable) return Promise.resolve(true);
      if (performance.now() - probedAt < HEALTH_FRESH_MS) return Promise.resolve(false);
      probing ??= services.db.health
        .probe(services.db.knex, services.db.leadership.holder, services.clock.now())
        .finally(() => {
          probedAt = performance.now();
          probing = null;
        });
      return probing;
    };
    return {
      routes: [
        defineRoute({
          method: 'GET',
          path: '/healthz',
          auth: 'public',
          summary: 'Health check: 200 when the store answers and takes writes, 503 otherwise',
          description: 'A store whose disk is full answers reads but refuses writes: then 503 `The store cannot be written: …`.',
          errors: [503],
          probe: true,
          schemas: { response: Type.Object({ status: Type.Literal('ok'), store: Type.String() }) },
          async handler() {
            if (!(await storeAnswers())) throw unavailable('The store is not reachable');
            if (!(await storeWrites())) {
              const { reason, since } = services.db.health.unwritable ?? { reason: 'a write failed', since: '' };
              throw unavailable(`The store cannot be written: ${reason}${since ? ` (since ${since})` : ''}; free space on the disk that holds it`);
            }
            return { status: 'ok', store: services.db.dialect };
          },
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/version',
          auth: 'public',
          summary: 'Version of hangar and of its API',
          schemas: {
            response: Type.Object({
              version: Type.String(),
              api_version: Type.Literal('v1'),
              commit: Type.Optional(Type.String()),
              build_date: Type.Optional(Type.String()),
            }),
          },
          handler: () => versionInfo,
        }),
        defineRoute({
          method: 'GET',
          path: '/v1/ca',
          auth: 'public',
          summary: 'The CA certificate (PEM); 404 when the operator provided the server certificate',
          produces: 'application/x-pem-file',
          errors: [404],
          handler() {
            if (services.ca.operatorCertificates) {
              throw notFound('The server certificate was provided by the operator; there is no hangar CA to download');
            }
            return Reply.raw(services.ca.caPem, 'application/x-pem-file');
          },
        }),
        openApiRoute(services, 'control', '/v1/openapi.json'),
        defineRoute({
          method: 'GET',
          path: '/v1/agent/binary',
          auth: 'public',
          summary: 'Download the agent executable for an architecture; version and SHA-256 in the headers',
          description:
            'Brotli-compressed (`Content-Encoding: br`, about 30 % of the size) to a client that accepts `br`. `X-Checksum-Sha256` is always the SHA-256 of the executable itself (after decoding).',
          produces: 'application/octet-stream',
          errors: [503],
          schemas: { query: Type.Object({ arch: Type.Union([Type.Literal('amd64'), Type.Literal('arm64')]) }, { additionalProperties: false }) },
          handler(req) {
            const binary = binaries.describe(req.query.arch);
            if (!binary) throw unavailable(missingExecutable(req.query.arch));
            const packed = binary.compressed && acceptsEncoding(req.headers['accept-encoding'], binary.compressed.encoding) ? binary.compressed : null;
            const file = packed?.file ?? binary.file;
            return Reply.raw(createReadStream(file), 'application/octet-stream', {
              'Content-Length': String(statSync(file).size),
              ...(packed ? { 'Content-Encoding': packed.encoding } : {}),
              Vary: 'Accept-Encoding',
              'Content-Disposition': `attachment; filename="hangar-agent-linux-${req.query.arch}"`,
              'X-Hangar-Agent-Version': binary.version,
              'X-Checksum-Sha256': binary.sha256,
            });
          },
        }),
      ],
    };
  },
});

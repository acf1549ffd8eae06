/**
 * The k8s backend's bundle format: Kubernetes manifests (multi-document YAML), read once here for
 * both halves of the backend — the control plane checks a manifest before anything is deployed
 * ({@link manifestFormat}), the driver applies what the same reader gives it (./manifests.ts).
 */
import { Type } from '@sinclair/typebox';
import { LineCounter, parseAllDocuments } from 'yaml';
import type { BundleFormat, ParsedBundle } from '../../core/clusters/backend.js';
import { badRequest } from '../../core/errors.js';

/** A manifest document as read: a Kubernetes object (apiVersion, kind and metadata.name at least). */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  [key: string]: unknown;
}

/** Why a manifest cannot be taken: document `document` (1-based) `what` ("is not valid YAML: …"), or no objects at all (`document` null). */
export class ManifestProblem extends Error {
  constructor(
    readonly document: number | null,
    readonly what: string,
  ) {
    super(document === null ? 'the manifest has no objects' : `document ${document} of the manifest ${what}`);
  }
}

/**
 * The objects of a manifest, each checked to be a Kubernetes object; empty documents (a trailing
 * `---`) are skipped. Throws a {@link ManifestProblem} naming the document, its line and column.
 */
export function readManifest(text: string): ManifestObject[] {
  const lines = new LineCounter();
  const documents = parseAllDocuments(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  const objects: ManifestObject[] = [];
  documents.forEach((document, i) => {
    const error = document.errors[0];
    if (error) {
      const at = lines.linePos(error.pos[0]);
      throw new ManifestProblem(i + 1, `is not valid YAML: line ${at.line}, column ${at.col}: ${error.message.split('\n')[0]}`);
    }
    const value = document.toJS({ maxAliasCount: 1000 }) as Record<string, any> | null;
    if (value === null || value === undefined) return;
    if (typeof value !== 'object' || Array.isArray(value) || typeof value.apiVersion !== 'string' || typeof value.kind !== 'string' || typeof value.metadata?.name !== 'string') {
      throw new ManifestProblem(i + 1, 'is not a Kubernetes object (it needs apiVersion, kind and metadata.name)');
    }
    objects.push(value as ManifestObject);
  });
  if (!objects.length) throw new ManifestProblem(null, '');
  return objects;
}

const invalid = (message: string) => badRequest(`Validation failed: ${message}`, [{ path: 'body.manifest', message }]);

/**
 * A manifest checked as far as hangar can without the cluster: valid YAML (400 naming the
 * document, line and column), every document a Kubernetes object. Its parts are its Deployments
 * (replicas: 1 when the manifest leaves them out). What the API server refuses is refused at deploy
 * time, before anything is applied (the driver applies every object as a dry run first).
 */
export function parseManifest(text: string): ParsedBundle {
  let objects: ManifestObject[];
  try {
    objects = readManifest(text);
  } catch (err) {
    if (!(err instanceof ManifestProblem)) throw err;
    throw invalid(err.document === null ? 'manifest has no objects' : `manifest document ${err.document} ${err.what}`);
  }
  const desired: Record<string, number | null> = {};
  for (const object of objects) {
    if (object.kind !== 'Deployment' || object.apiVersion !== 'apps/v1') continue;
    const replicas = (object.spec as { replicas?: unknown } | undefined)?.replicas;
    desired[object.metadata.name] = typeof replicas === 'number' ? replicas : 1;
  }
  return { desired, routes: [], objects: [] };
}

/** Manifests: the k8s backend's services (`manifest` in requests, base64), applied server-side; the objects applied are kept. */
export const manifestFormat: BundleFormat = {
  name: 'manifest',
  field: 'manifest',
  schema: Type.String({ minLength: 1, maxLength: 1_000_000, description: 'the Kubernetes manifest (multi-document YAML), base64-encoded' }),
  describes: 'manifest on a Kubernetes cluster',
  appliedObjects: true,
  parse: (text) => parseManifest(text),
};

import { LineCounter, parseAllDocuments } from 'yaml';
import { badRequest } from '../../core/errors.js';

const invalid = (message: string) => badRequest(`Validation failed: ${message}`, [{ path: 'body.manifest', message }]);

/** What hangar reads from a Kubernetes manifest before the cluster sees it: its objects, and the replicas its Deployments ask for. */
export interface ParsedManifest {
  objects: Array<{ api_version: string; kind: string; name: string; namespace: string | null }>;
  /** Deployment name → replicas (1 when the manifest leaves it out), as the service's parts. */
  desired: Record<string, number | null>;
}

/**
 * A manifest (multi-document YAML) checked as far as hangar can without the cluster: valid YAML
 * (400 naming the document, line and column), every document a Kubernetes object (apiVersion,
 * kind, metadata.name). What the API server refuses is refused at deploy time, before anything
 * is applied (the driver applies every object as a dry run first).
 */
export function parseManifest(text: string): ParsedManifest {
  const lines = new LineCounter();
  const documents = parseAllDocuments(text, { lineCounter: lines, prettyErrors: false, uniqueKeys: true });
  if (!Array.isArray(documents)) throw invalid('manifest is not YAML documents');
  const parsed: ParsedManifest = { objects: [], desired: {} };
  documents.forEach((document, i) => {
    const error = document.errors[0];
    if (error) {
      const at = lines.linePos(error.pos[0]);
      throw invalid(`manifest document ${i + 1} is not valid YAML: line ${at.line}, column ${at.col}: ${error.message.split('\n')[0]}`);
    }
    const value = document.toJS({ maxAliasCount: 1000 }) as Record<string, any> | null;
    if (value === null || value === undefined) return;
    if (typeof value !== 'object' || Array.isArray(value) || typeof value.apiVersion !== 'string' || typeof value.kind !== 'string' || typeof value.metadata?.name !== 'string') {
      throw invalid(`manifest document ${i + 1} is not a Kubernetes object (it needs apiVersion, kind and metadata.name)`);
    }
    parsed.objects.push({ api_version: value.apiVersion, kind: value.kind, name: value.metadata.name, namespace: typeof value.metadata.namespace === 'string' ? value.metadata.namespace : null });
    if (value.kind === 'Deployment' && value.apiVersion === 'apps/v1') {
      const replicas = value.spec?.replicas;
      parsed.desired[value.metadata.name] = typeof replicas === 'number' ? replicas : 1;
    }
  });
  if (!parsed.objects.length) throw invalid('manifest has no objects');
  return parsed;
}

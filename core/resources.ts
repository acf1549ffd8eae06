import { defineExtensionPoint } from './provided.js';

/**
 * Extension points about resources that several plugins (and core's kits: core/clusters/workloads.ts)
 * contribute to and one plugin reads: the tags plugin resolves references with the taggable
 * resources, the volumes plugin asks the volume users what mounts a volume.
 */

/**
 * The id of the resource a reference names — its id, or its name where the type's own paths take
 * names (`/v1/swarms/{id}` does) — or null when there is none. May throw an HttpError (409 for a
 * name several resources share).
 */
export type ResourceResolver = (idOrName: string) => Promise<string | null>;

/**
 * The resource types whose plugins resolve a reference to an id, so that tags are stored by id
 * whether a request named the resource by id or by name, and `PUT /v1/tags` refuses (404) a tag
 * for a resource that does not exist (cleanup resolves names the same way). Every resource plugin
 * contributes its own; types nobody answers for (`cluster`) are taken on trust.
 */
export const TaggableResources = defineExtensionPoint<{ type: string; resolve: ResourceResolver }>('tags.resources', 'taggable resources');

/** One record that uses a volume; `cluster_id` is the cluster it mounts the volume on (absent: counts on every cluster). */
export interface VolumeUser {
  type: string;
  id: string;
  name: string;
  cluster_id?: string;
}

/** What uses a volume: each workload plugin answers for its own records. */
export type VolumeUsers = (volumeId: string) => Promise<VolumeUser[]>;

/** What uses volumes (the volumes plugin reads it at a DELETE). */
export const VolumeUsersPoint = defineExtensionPoint<VolumeUsers>('volumes.users', 'volume users');

/**
 * How a workload kind is stopped for a restore of a volume it mounts and brought back after
 * (`POST /v1/volumes/{id}/restore {stop_workloads: true}`, a backup with consistency `stop`), each
 * asked about the volume `volumeId` (a compose stack stops only its parts that mount it):
 * `replicas` answers what it runs now (null: none; recorded before anything is stopped, so that
 * another control plane can bring it back if this one dies); `stop` scales the record to zero and
 * answers once its runtime has settled there, with the replicas it had (null: it ran none, so
 * nothing is to bring back); `start` scales it back to those. A `start` refused because another
 * operation holds the record (a 409) is tried again later.
 */
export interface VolumeUserStopper {
  type: string;
  replicas(id: string, volumeId: string): Promise<number | null>;
  stop(id: string, volumeId: string): Promise<number | null>;
  start(id: string, replicas: number, volumeId: string): Promise<void>;
}

export const VolumeUserStoppers = defineExtensionPoint<VolumeUserStopper>('volumes.user-stoppers', 'volume user stoppers');

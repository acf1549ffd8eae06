/** Instance types: CPU and memory limits per task. */
export const INSTANCE_TYPES = [
  { name: 'nano', cpus: 0.5, memory_mb: 256 },
  { name: 'micro', cpus: 1, memory_mb: 512 },
  { name: 'small', cpus: 1, memory_mb: 1024 },
  { name: 'medium', cpus: 2, memory_mb: 2048 },
  { name: 'large', cpus: 4, memory_mb: 4096 },
  { name: 'xlarge', cpus: 8, memory_mb: 8192 },
] as const;

export type InstanceTypeName = (typeof INSTANCE_TYPES)[number]['name'];

export const DEFAULT_INSTANCE_TYPE: InstanceTypeName = 'micro';

export function instanceType(name: string) {
  return INSTANCE_TYPES.find((t) => t.name === name);
}

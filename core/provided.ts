/**
 * What plugins share, by typed reference instead of by name and cast. A plugin says what it
 * provides (`provides: [VolumesRef]`) and what it needs (`deps: [NodesRef]`); core sets plugins up
 * in an order where every provider comes before its users, and a start-up with a need nobody
 * provides fails naming it. Extension points are the other direction: many plugins contribute
 * (every workload plugin says what uses a volume) and one reads them all when it needs them, so
 * their order does not matter.
 */

/** A name plugins share, typed: `T` only types it. */
interface TypedName<T> {
  readonly name: string;
  readonly description: string;
  /** Phantom: carries the type, never set. */
  readonly type?: T;
}

function typedName<T>(name: string, description = name): TypedName<T> {
  return Object.freeze({ name, description });
}

/** A value one plugin provides and others use. */
export type ServiceRef<T> = TypedName<T>;
export const defineServiceRef: <T>(name: string, description?: string) => ServiceRef<T> = typedName;

/** Something plugins contribute to (many), read by the one that owns it. */
export type ExtensionPoint<T> = TypedName<T>;
export const defineExtensionPoint: <T>(name: string, description?: string) => ExtensionPoint<T> = typedName;

/** The values plugins share and the contributions to extension points. */
export class ServiceRegistry {
  private readonly values = new Map<string, unknown>();
  private readonly contributed = new Map<string, unknown[]>();

  /** Makes a value available under its reference (once; a second provider of the same reference is a bug). */
  provide<T>(ref: ServiceRef<T>, value: T): void {
    if (this.values.has(ref.name)) throw new Error(`${ref.description} (${ref.name}) is provided twice`);
    this.values.set(ref.name, value);
  }

  /** The value of a declared dependency; throws naming it when no loaded plugin provided it. */
  get<T>(ref: ServiceRef<T>): T;
  /** By name, untyped: for tools such as the runner's `plugin(name)`. */
  get(name: string): unknown;
  get(ref: ServiceRef<unknown> | string): unknown {
    const name = typeof ref === 'string' ? ref : ref.name;
    if (typeof ref === 'string') return this.values.get(name);
    if (!this.values.has(name)) throw new Error(`${ref.description} (${name}) is not provided: load the plugin that provides it`);
    return this.values.get(name);
  }

  /** The value of an optional dependency, or undefined when no loaded plugin provides it. */
  find<T>(ref: ServiceRef<T>): T | undefined {
    return this.values.get(ref.name) as T | undefined;
  }

  has(ref: ServiceRef<unknown> | string): boolean {
    return this.values.has(typeof ref === 'string' ? ref : ref.name);
  }

  names(): string[] {
    return [...this.values.keys()];
  }

  /** Adds a contribution to an extension point. */
  contribute<T>(point: ExtensionPoint<T>, value: T): void {
    this.contributed.set(point.name, [...(this.contributed.get(point.name) ?? []), value]);
  }

  /** Every contribution so far, in the order made. Read them when needed, not at setup. */
  contributions<T>(point: ExtensionPoint<T>): readonly T[] {
    return (this.contributed.get(point.name) ?? []) as T[];
  }
}

import { EventEmitter } from 'node:events';

/**
 * A topic of the in-process event bus and the payload it carries: publishers and subscribers name
 * the same declared topic, so a payload's shape is checked at both ends, never cast.
 */
export interface Topic<T> {
  readonly name: string;
  /** Never set: carries the payload's type. */
  readonly payload?: T;
}

export function defineTopic<T>(name: string): Topic<T> {
  return { name };
}

/**
 * In-process publish/subscribe between core and plugins (e.g. {@link ResourceDeleted}).
 * Subscribers must not throw; a failing subscriber is logged by the bus owner.
 */
export class EventBus {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  publish<T>(topic: Topic<T>, payload: T): void {
    this.emitter.emit(topic.name, payload);
  }

  subscribe<T>(topic: Topic<T>, listener: (payload: T) => void): () => void {
    const heard = listener as (payload: unknown) => void;
    this.emitter.on(topic.name, heard);
    return () => this.emitter.off(topic.name, heard);
  }
}

/** A record was removed (`type` as the tags plugin and the API name it): who holds something about it drops it. */
export const ResourceDeleted = defineTopic<{ type: string; id: string }>('resource.deleted');

/**
 * How a plugin forgets one of its records: removes it and, when it was there, publishes
 * `resource.deleted` {type, id} so that other plugins (tags) drop what they hold about it.
 */
export function recordRemover(bus: EventBus, type: string, repository: { remove(id: string): Promise<boolean> }): (id: string) => Promise<boolean> {
  return async (id) => {
    const removed = await repository.remove(id);
    if (removed) bus.publish(ResourceDeleted, { type, id });
    return removed;
  };
}

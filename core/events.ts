import { EventEmitter } from 'node:events';

/**
 * In-process publish/subscribe between core and plugins (e.g. "node.updated").
 * Subscribers must not throw; a failing subscriber is logged by the bus owner.
 */
export class EventBus {
  private readonly emitter = new EventEmitter();

  constructor() {
    this.emitter.setMaxListeners(0);
  }

  publish(topic: string, payload: unknown): void {
    this.emitter.emit(topic, payload);
  }

  subscribe(topic: string, listener: (payload: unknown) => void): () => void {
    this.emitter.on(topic, listener);
    return () => this.emitter.off(topic, listener);
  }
}

/**
 * How a plugin forgets one of its records: removes it and, when it was there, publishes
 * `resource.deleted` {type, id} so that other plugins (tags) drop what they hold about it.
 */
export function recordRemover(bus: EventBus, type: string, repository: { remove(id: string): Promise<boolean> }): (id: string) => Promise<boolean> {
  return async (id) => {
    const removed = await repository.remove(id);
    if (removed) bus.publish('resource.deleted', { type, id });
    return removed;
  };
}

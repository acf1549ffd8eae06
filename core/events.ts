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

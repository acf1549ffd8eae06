import { useEffect, useState } from 'preact/hooks';
import { sessionEnded } from './api';

export interface LiveEvent {
  id?: string;
  type: string;
  data: Record<string, any>;
}

type Listener = (event: LiveEvent) => void;
const listeners = new Set<Listener>();
let source: EventSource | null = null;
let connected = false;
const stateListeners = new Set<(connected: boolean) => void>();

const TYPES = ['resource.changed', 'node.status', 'node.event', 'task.state', 'reset'];

function setConnected(value: boolean): void {
  connected = value;
  for (const l of stateListeners) l(value);
}

/**
 * One EventSource on GET /v1/events/stream for the whole page (it reconnects by itself, with
 * Last-Event-ID). Views subscribe and reload what they show when an event concerns it; they never
 * poll their lists.
 */
export function startLive(): void {
  if (source) return;
  source = new EventSource('/v1/events/stream');
  source.onopen = () => setConnected(true);
  source.onerror = () => setConnected(false);
  // The control plane ends the stream with `end` when the session would be refused now (logged out,
  // its user deleted, a new password or role: reason revoked or role_changed) or has expired: the
  // browser would reconnect and be refused, so the page goes to the login screen at once. At a
  // shutdown it reconnects, to the restarted or another control plane.
  source.addEventListener('end', (e) => {
    const { reason } = JSON.parse((e as MessageEvent<string>).data) as { reason: string };
    if (reason === 'shutdown') return;
    stopLive();
    sessionEnded();
  });
  for (const type of TYPES) {
    source.addEventListener(type, (e) => {
      const message = e as MessageEvent<string>;
      const event = { id: message.lastEventId, type, data: JSON.parse(message.data) };
      for (const l of listeners) l(event);
    });
  }
}

export function stopLive(): void {
  source?.close();
  source = null;
  setConnected(false);
}

export function subscribe(listener: Listener): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Calls `reload` (at most every 300 ms) when an event matches; a `reset` always matches. */
export function useLive(matches: (event: LiveEvent) => boolean, reload: () => void, deps: unknown[] = []): void {
  useEffect(() => {
    let timer: number | undefined;
    return subscribe((event) => {
      if (event.type !== 'reset' && !matches(event)) return;
      clearTimeout(timer);
      timer = window.setTimeout(reload, 300);
    });
  }, deps);
}

export const changed = (...types: string[]) => (e: LiveEvent) => e.type === 'resource.changed' && types.includes(e.data.type);

export function useLiveConnected(): boolean {
  const [value, set] = useState(connected);
  useEffect(() => {
    stateListeners.add(set);
    return () => void stateListeners.delete(set);
  }, []);
  return value;
}

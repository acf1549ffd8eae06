/** One Server-Sent Event as received. */
export interface ServerSentEvent {
  id?: string;
  event: string;
  data: string;
}

/**
 * Splits a text/event-stream into events (the WHATWG rules that matter here: `field: value` lines,
 * blank line ends an event, `:` lines are comments, several `data` lines join with newlines).
 * Feed it chunks as they arrive; it keeps a partial event for the next chunk.
 */
export class SseParser {
  private buffer = '';
  /** The id of the last event that carried one (what a reconnect sends as Last-Event-ID). */
  lastEventId: string | undefined;

  push(chunk: string): ServerSentEvent[] {
    this.buffer += chunk.replace(/\r\n?/g, '\n');
    const out: ServerSentEvent[] = [];
    let end: number;
    while ((end = this.buffer.indexOf('\n\n')) >= 0) {
      const block = this.buffer.slice(0, end);
      this.buffer = this.buffer.slice(end + 2);
      const event: ServerSentEvent = { event: 'message', data: '' };
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (!line || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') data.push(value);
        else if (field === 'event') event.event = value;
        else if (field === 'id') event.id = value;
      }
      if (!data.length) continue;
      event.data = data.join('\n');
      if (event.id !== undefined) this.lastEventId = event.id;
      out.push(event);
    }
    return out;
  }
}

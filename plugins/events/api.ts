import { defineServiceRef } from '../../core/plugin.js';
import type { Journal } from './journal.js';

/** The events plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** The journal of live events (for the runner's `plugin('events')` and any plugin that adds to it). */
export const EventsJournalRef = defineServiceRef<Journal>('events', 'the live events journal');

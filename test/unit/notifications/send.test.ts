import { expect } from 'chai';
import { Dispatcher } from '../../../plugins/notifications/dispatcher.js';
import type { NotificationEvent } from '../../../plugins/notifications/events.js';
import { bodyFor, mailTo, type AttemptResult } from '../../../plugins/notifications/send.js';
import type { DeliveryRecord, Outbox } from '../../../plugins/notifications/store.js';
import { validateConfigSection } from '../../../core/config.js';
import { ConfigError } from '../../../core/errors.js';
import type { Mailer } from '../../../core/mail.js';
import type { JsonSchema } from '../../../core/validation.js';
import { NotificationsConfigSchema } from '../../../plugins/notifications/index.js';

/** A join's hostname reaches an event's message: what an unauthenticated caller could put there. */
const hostile: NotificationEvent = {
  id: 'nev-1',
  occurred_at: '2026-11-28T10:00:00.000Z',
  type: 'node.join_failed',
  severity: 'warning',
  resource: null,
  message: 'join refused for <!channel> <https://evil.example|click> @everyone **urgent** [x](https://evil.example) & more',
  data: {},
};

describe('notifications: chat bodies carry an event’s text inert', () => {
  it('escapes Slack’s control characters & < >', () => {
    const { text } = bodyFor('slack', hostile) as { text: string };
    expect(text).to.not.match(/[<>]/);
    expect(text).to.include('&lt;!channel&gt;').and.include('&lt;https://evil.example|click&gt;').and.include('&amp; more');
  });

  it('tells Discord to act on no mention', () => {
    const body = bodyFor('discord', hostile) as { content: string; allowed_mentions: unknown };
    expect(body.allowed_mentions).to.deep.equal({ parse: [] });
    expect(body.content).to.include('@everyone');
  });

  it('escapes Markdown in the Teams card’s text', () => {
    const body = bodyFor('teams', hostile) as any;
    const text = body.attachments[0].content.body[1].text as string;
    expect(text).to.include('\\*\\*urgent\\*\\*').and.include('\\[x\\]\\(https://evil\\.example\\)');
    expect(text.replace(/\\./g, '')).to.not.match(/[*[\]()<>]/);
  });
});

describe('notifications: an email attempt is bounded', () => {
  const channel = { id: 'nch-1', kind: 'email' as const, url: null, headers: {}, recipients: ['ops@example.test'], secret: null };
  const stuck: Mailer = { send: () => new Promise(() => undefined) } as unknown as Mailer;

  it('fails after the timeout when the mail server never answers', async () => {
    const result = await mailTo(channel, hostile, 'ndl-1', stuck, { from: 'hangar <a@b.test>', timeoutMs: 50 });
    expect(result).to.include({ ok: false, status_code: null });
    expect(result.error).to.include('no answer from the mail server within 50 ms');
  });

  it('fails when the sender abandons the attempt', async () => {
    const controller = new AbortController();
    const pending = mailTo(channel, hostile, 'ndl-1', stuck, { from: 'hangar <a@b.test>', timeoutMs: 60_000, signal: controller.signal });
    controller.abort();
    expect((await pending).error).to.include('abandoned');
  });
});

describe('notifications: the dispatcher of a control plane that lost the lease', () => {
  const delivery = (id: string) => ({ id, channel_id: 'nch-1', event_type: 'node.created', attempts: 0 }) as unknown as DeliveryRecord;

  it('claims nothing more once a delivery finishes, and an attempt that throws is recorded failed', async () => {
    let leader = true;
    const claims: number[] = [];
    const settled: AttemptResult[] = [];
    let done!: () => void;
    const finished = new Promise<void>((resolve) => (done = resolve));
    const outbox = {
      claim: async (limit: number) => {
        claims.push(limit);
        return claims.length === 1 ? [delivery('ndl-a')] : [];
      },
      settleAll: async (finished: Array<{ delivery: DeliveryRecord; result: AttemptResult }>) => {
        settled.push(...finished.map((f) => f.result));
        // The lease went to another control plane while the attempt was on its way.
        leader = false;
        setImmediate(done);
        return finished.map(() => 'pending');
      },
      release: async () => undefined,
    } as unknown as Outbox;
    const log = { info() {}, warn() {}, debug() {}, error() {} } as any;
    const dispatcher = new Dispatcher(outbox, async () => Promise.reject(new Error('cannot open the channel')), {
      concurrency: 4,
      channelConcurrency: 2,
      holdMs: 1000,
      retry: { baseMs: 10, maxMs: 10, periodMs: 1000 },
      log,
      isLeader: async () => leader,
      refillMs: 1,
    });
    await dispatcher.turn();
    await finished;
    // The turn that refills the freed slot (after refillMs) has asked for the lease and claimed nothing.
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(claims).to.have.length(1);
    expect(settled).to.have.length(1);
    expect(settled[0]).to.include({ ok: false, status_code: null });
    expect(settled[0]!.error).to.include('cannot open the channel');
    await dispatcher.close();
  });
});

describe('notifications: configuration', () => {
  it('refuses a retention past ten years, naming the key', () => {
    expect(() => validateConfigSection({ retention_days: 100_000 }, NotificationsConfigSchema as unknown as JsonSchema, 'notifications')).to.throw(ConfigError, 'notifications.retention_days must be <= 3650');
    const section: Record<string, unknown> = { retention_days: 3650 };
    validateConfigSection(section, NotificationsConfigSchema as unknown as JsonSchema, 'notifications');
    expect(section.retention_days).to.equal(3650);
  });
});

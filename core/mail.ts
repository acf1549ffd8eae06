import net from 'node:net';
import tls from 'node:tls';
import type { Transporter } from 'nodemailer';
import type { HangarConfig } from '../config/schema.js';

export interface MailMessage {
  to: string;
  from: string;
  subject: string;
  text: string;
}

/** Sends mail over real SMTP (nodemailer); the only place that talks to it. */
export interface Mailer {
  send(message: MailMessage): Promise<void>;
  /** Connects, greets and (with a user) logs in to the SMTP server: null when that works, else why not. */
  check(): Promise<string | null>;
  close(): void;
}

/**
 * nodemailer (~300 kB of code) is loaded with the first mail sent or checked, not with every start:
 * most control planes send none, and the ones that do can wait for it once.
 */
export function createMailer(config: HangarConfig['mail']): Mailer {
  let transport: Promise<Transporter> | undefined;
  const open = () =>
    (transport ??= import('nodemailer').then(({ default: nodemailer }) =>
      nodemailer.createTransport({
        host: config.host,
        port: config.port,
        secure: config.secure,
        ignoreTLS: config.starttls === 'off',
        requireTLS: config.starttls === 'required',
        auth: config.user ? { user: config.user, pass: config.password ?? '' } : undefined,
        connectionTimeout: 10_000,
        greetingTimeout: 10_000,
        socketTimeout: 30_000,
      }),
    ));
  return {
    async send(message) {
      await (await open()).sendMail(message);
    },
    // A check that only needs the server to answer (no login, STARTTLS not required) is a greeting
    // exchanged without nodemailer, so a start-up's check does not load it (~9 MB of a control
    // plane's idle memory); a login or a required STARTTLS is checked by nodemailer itself.
    check: () => (config.user || config.starttls === 'required' ? open().then((t) => t.verify()) : greet(config)).then(
      () => null,
      (err: Error) => err.message,
    ),
    close: () => void transport?.then((t) => t.close()),
  };
}

/**
 * Connects to the SMTP server, reads its 220 greeting, says EHLO and reads its 250 reply, then QUIT:
 * resolves when the server answered as an SMTP server does, rejects with why not (the socket's error,
 * the server's refusal, or no answer within 10 s).
 */
function greet(config: HangarConfig['mail']): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = config.secure ? tls.connect({ host: config.host, port: config.port, servername: net.isIP(config.host) ? undefined : config.host }) : net.connect({ host: config.host, port: config.port });
    let buffered = '';
    let said: 'greeting' | 'ehlo' = 'greeting';
    const done = (err?: Error) => {
      socket.removeAllListeners('data');
      socket.setTimeout(0);
      if (err) socket.destroy();
      else socket.end('QUIT\r\n');
      if (err) reject(err);
      else resolve();
    };
    socket.setTimeout(10_000, () => done(new Error(`no answer from ${config.host}:${config.port} within 10 s`)));
    socket.on('error', (err) => done(err));
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      // A reply is complete at a line whose code is followed by a space (not "250-…", a continuation).
      const last = buffered.split('\r\n').filter(Boolean).at(-1);
      if (!buffered.endsWith('\r\n') || !last || !/^\d{3}( |$)/.test(last)) return;
      const code = last.slice(0, 3);
      buffered = '';
      if (said === 'greeting' && code === '220') {
        said = 'ehlo';
        socket.write('EHLO hangar\r\n');
      } else if (said === 'ehlo' && code === '250') done();
      else done(new Error(`${config.host}:${config.port} answered ${said === 'greeting' ? 'the connection' : 'EHLO'} with ${last.slice(0, 200)}`));
    });
  });
}

/** Replaces `{{name}}` placeholders; unknown ones are left as they are. */
export function renderTemplate(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, key: string) => (key in values ? String(values[key]) : whole));
}

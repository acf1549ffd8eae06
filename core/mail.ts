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
    check: () => open().then((t) => t.verify()).then(
      () => null,
      (err: Error) => err.message,
    ),
    close: () => void transport?.then((t) => t.close()),
  };
}

/** Replaces `{{name}}` placeholders; unknown ones are left as they are. */
export function renderTemplate(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, key: string) => (key in values ? String(values[key]) : whole));
}

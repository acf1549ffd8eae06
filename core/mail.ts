import nodemailer, { type Transporter } from 'nodemailer';
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

export function createMailer(config: HangarConfig['mail']): Mailer {
  const transport: Transporter = nodemailer.createTransport({
    host: config.host,
    port: config.port,
    secure: config.secure,
    ignoreTLS: config.starttls === 'off',
    requireTLS: config.starttls === 'required',
    auth: config.user ? { user: config.user, pass: config.password ?? '' } : undefined,
    connectionTimeout: 10_000,
    greetingTimeout: 10_000,
    socketTimeout: 30_000,
  });
  return {
    async send(message) {
      await transport.sendMail(message);
    },
    check: () => transport.verify().then(
      () => null,
      (err: Error) => err.message,
    ),
    close: () => transport.close(),
  };
}

/** Replaces `{{name}}` placeholders; unknown ones are left as they are. */
export function renderTemplate(template: string, values: Record<string, string | number>): string {
  return template.replace(/\{\{\s*(\w+)\s*\}\}/g, (whole, key: string) => (key in values ? String(values[key]) : whole));
}

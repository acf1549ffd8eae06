import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { Type } from '@sinclair/typebox';
import { notFound } from '../../core/errors.js';
import { Reply } from '../../core/http/reply.js';
import { fromRoot } from '../../core/paths.js';
import { definePlugin, defineRoute } from '../../core/plugin.js';

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json',
  '.map': 'application/json',
};

/** Everything the page needs comes from this origin; nothing inline, no frames, no other hosts. */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/**
 * The web dashboard at `/ui` on the control API's listener (same origin as the API, so no CORS):
 * the static files `npm run build` writes to dist/ui (web/, docs/dashboard.md). The page logs in
 * with a session cookie (plugins/iam/sessions.ts). File names carry a content hash, so every file
 * but index.html is cached for good; index.html never is.
 */
export default definePlugin({
  name: 'dashboard',
  description: 'the web dashboard at /ui (static files built by npm run build)',
  configSchema: Type.Object(
    { dir: Type.Union([Type.String(), Type.Null()], { default: null, description: 'where npm run build put the dashboard (default dist/ui)' }) },
    { additionalProperties: false, default: {} },
  ),
  setup(services) {
    // From the installation's root, not from this module: the build moves the module (dist/hangar).
    const dir = path.resolve((services.config.dashboard as { dir: string | null }).dir ?? fromRoot('dist', 'ui'));
    const file = (name: string) => {
      const full = path.join(dir, name);
      if (!existsSync(path.join(dir, 'index.html'))) throw notFound('The dashboard is not built on this control plane: run npm run build');
      if (path.dirname(full) !== dir || !/^[\w.-]+$/.test(name) || !existsSync(full) || !statSync(full).isFile()) throw notFound(`No dashboard file ${name}`);
      const immutable = name !== 'index.html';
      return Reply.raw(readFileSync(full), TYPES[path.extname(name)] ?? 'application/octet-stream', {
        'Cache-Control': immutable ? 'public, max-age=31536000, immutable' : 'no-store',
        'Content-Security-Policy': CSP,
        'X-Frame-Options': 'DENY',
        'Referrer-Policy': 'no-referrer',
      });
    };
    return {
      routes: [
        defineRoute({ method: 'GET', path: '/ui', auth: 'public', summary: 'The web dashboard (HTML)', produces: 'text/html', errors: [404], handler: () => file('index.html') }),
        defineRoute({
          method: 'GET',
          path: '/ui/{file}',
          auth: 'public',
          summary: 'A file of the web dashboard (scripts, styles, icons)',
          produces: [...new Set([...Object.values(TYPES), 'application/octet-stream'].map((t) => t.split(';')[0]!))],
          schemas: { params: Type.Object({ file: Type.String({ pattern: '^[\\w.-]+$', maxLength: 100 }) }) },
          handler: (req) => file(req.params.file === '' ? 'index.html' : req.params.file),
        }),
      ],
    };
  },
});

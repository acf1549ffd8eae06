import type { Context } from 'koa';
import type { RouteDef } from '../plugin.js';
import { RouteTree } from './router.js';

/** What a page elsewhere may send and read: the headers hangar's routes take and the ones a client needs back. */
const ALLOWED_HEADERS = 'Authorization, Content-Type, X-Request-Id';
const EXPOSED_HEADERS = 'Retry-After, X-Request-Id';
/** How long a browser may keep a preflight's answer. */
const MAX_AGE_SECONDS = 600;

const allows = (origins: readonly string[], origin: string) => origins.includes('*') || origins.includes(origin);

/**
 * Cross-origin access for the routes that declare `cors` (the login API with `login.cors_origins`):
 * the preflight (`OPTIONS` with `Access-Control-Request-Method`) of a route is answered 204 with
 * what it allows, and every answer of the route, errors too, names an allowed `Origin` in
 * `Access-Control-Allow-Origin`. An origin not in the list gets no such header, so the browser
 * keeps the answer from the page. Routes without `cors` are untouched (a preflight is a 405 there).
 * No credentials (cookies) are allowed across origins: these routes take bearer tokens.
 */
export class CorsPolicy {
  private readonly tree = new RouteTree<RouteDef>();
  private readonly any: boolean;

  constructor(routes: readonly RouteDef[]) {
    const declared = routes.filter((r) => r.cors?.length);
    for (const route of declared) this.tree.add(route.method, route.path, route);
    this.any = declared.length > 0;
  }

  private route(method: string, path: string): RouteDef | null {
    const match = this.tree.match(method, path);
    return match.kind === 'found' ? match.value : null;
  }

  /** Answers a preflight of a route that declares `cors`; false when the request is none (the router decides). */
  preflight(ctx: Context): boolean {
    if (!this.any || ctx.method !== 'OPTIONS') return false;
    const wanted = ctx.get('access-control-request-method').toUpperCase();
    const route = wanted ? this.route(wanted, ctx.path) : null;
    if (!route) return false;
    const origin = ctx.get('origin');
    ctx.set('Vary', 'Origin');
    if (origin && allows(route.cors!, origin)) {
      ctx.set('Access-Control-Allow-Origin', route.cors!.includes('*') ? '*' : origin);
      ctx.set('Access-Control-Allow-Methods', wanted === 'HEAD' ? 'GET, HEAD' : wanted);
      ctx.set('Access-Control-Allow-Headers', ALLOWED_HEADERS);
      ctx.set('Access-Control-Max-Age', String(MAX_AGE_SECONDS));
    }
    ctx.status = 204;
    return true;
  }

  /** Names an allowed origin on the answer of a route that declares `cors`; set before the route runs, so its errors carry it too. */
  decorate(ctx: Context): void {
    if (!this.any) return;
    const origin = ctx.get('origin');
    const route = origin ? this.route(ctx.method, ctx.path) : null;
    if (!route) return;
    ctx.set('Vary', 'Origin');
    if (!allows(route.cors!, origin)) return;
    ctx.set('Access-Control-Allow-Origin', route.cors!.includes('*') ? '*' : origin);
    ctx.set('Access-Control-Expose-Headers', EXPOSED_HEADERS);
  }
}

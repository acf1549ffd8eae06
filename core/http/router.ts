/**
 * The route lookup, built once at start-up: a tree of path segments, so that a request costs one
 * step per segment whatever the number of routes. Matching as the listeners always did: static
 * segments case-insensitively, an optional trailing slash, `{name}` segments captured (URI-decoded,
 * or as sent when the encoding is malformed), static segments before parameters, and `HEAD` served
 * by a `GET` route. The most concrete path that matches decides, as in OpenAPI: when it lacks the
 * method the answer is method-not-allowed, not a fall-back to a template (`PATCH /v1/nodes/deploy`
 * is a 405, not an update of a node called "deploy").
 */
export type RouteMatch<T> =
  | { kind: 'found'; value: T; params: Record<string, string> }
  | { kind: 'method-not-allowed'; allowed: string[] }
  | { kind: 'not-found' };

interface Node<T> {
  statics: Map<string, Node<T>>;
  /** Any value in this segment; the names are each route's own (`{id}` here, `{nodeId}` there). */
  param?: Node<T>;
  /** Methods at this path, in registration order, with the names of the route's parameters. */
  methods: Map<string, { value: T; names: string[] }>;
  /** What `Allow` lists for this path (a GET route also answers HEAD). */
  allowed: string[];
}

const newNode = <T>(): Node<T> => ({ statics: new Map(), methods: new Map(), allowed: [] });

function segments(path: string): string[] {
  const parts = path.split('/').slice(1);
  if (parts.length > 1 && parts[parts.length - 1] === '') parts.pop();
  return parts;
}

function decode(segment: string): string {
  if (!segment.includes('%')) return segment;
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

export class RouteTree<T> {
  private readonly root: Node<T> = newNode();

  /** `path` in OpenAPI style (`/v1/nodes/{id}`). The first route registered for a method and path wins. */
  add(method: string, path: string, value: T): void {
    let node = this.root;
    const names: string[] = [];
    for (const segment of segments(path)) {
      const param = /^\{(\w+)\}$/.exec(segment);
      if (param) {
        names.push(param[1]!);
        node = node.param ??= newNode();
      } else {
        const key = segment.toLowerCase();
        let next = node.statics.get(key);
        if (!next) node.statics.set(key, (next = newNode()));
        node = next;
      }
    }
    if (node.methods.has(method)) return;
    node.methods.set(method, { value, names });
    for (const m of method === 'GET' ? ['HEAD', 'GET'] : [method]) if (!node.allowed.includes(m)) node.allowed.push(m);
  }

  match(method: string, path: string): RouteMatch<T> {
    const parts = segments(path);
    // An empty segment (`/v1//nodes`) matches nothing.
    if (parts.length > 1 && parts.includes('')) return { kind: 'not-found' };
    const wanted = method === 'HEAD' ? 'GET' : method;
    const captured: string[] = [];
    const walk = (node: Node<T>, i: number): RouteMatch<T> | null => {
      if (i === parts.length) {
        if (!node.allowed.length) return null;
        const route = node.methods.get(wanted);
        if (!route) return { kind: 'method-not-allowed', allowed: node.allowed };
        const params: Record<string, string> = {};
        for (let k = 0; k < route.names.length; k++) params[route.names[k]!] = captured[k]!;
        return { kind: 'found', value: route.value, params };
      }
      const part = parts[i]!;
      const stat = node.statics.get(part.toLowerCase());
      if (stat) {
        const found = walk(stat, i + 1);
        if (found) return found;
      }
      if (node.param && part !== '') {
        captured.push(decode(part));
        const found = walk(node.param, i + 1);
        if (found) return found;
        captured.pop();
      }
      return null;
    };
    return walk(this.root, 0) ?? { kind: 'not-found' };
  }
}

import { useEffect, useState } from 'preact/hooks';

/** Hash routes (`#/nodes/node-123`): the server serves one page at /ui, the rest is the client's. */
export function useRoute(): string[] {
  const read = () => (location.hash.replace(/^#\/?/, '') || 'fleet').split('/').map(decodeURIComponent);
  const [route, setRoute] = useState(read);
  useEffect(() => {
    const onChange = () => setRoute(read());
    addEventListener('hashchange', onChange);
    return () => removeEventListener('hashchange', onChange);
  }, []);
  return route;
}

export const href = (...parts: string[]) => `#/${parts.map(encodeURIComponent).join('/')}`;
export const go = (...parts: string[]) => (location.hash = href(...parts));

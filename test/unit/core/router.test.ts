import { expect } from 'chai';
import { RouteTree } from '../../../core/http/router.js';

describe('route lookup (core/http/router.ts)', () => {
  const tree = new RouteTree<string>();
  tree.add('GET', '/v1/nodes', 'list');
  tree.add('POST', '/v1/nodes', 'create');
  tree.add('GET', '/v1/nodes/{id}', 'get');
  tree.add('DELETE', '/v1/nodes/{id}', 'delete');
  tree.add('POST', '/v1/nodes/token', 'token');
  tree.add('GET', '/v1/nodes/{id}/logs/{taskId}', 'log');
  tree.add('GET', '/healthz', 'health');

  const value = (method: string, path: string) => {
    const m = tree.match(method, path);
    return m.kind === 'found' ? m.value : m.kind;
  };

  it('finds static paths, case-insensitively and with an optional trailing slash', () => {
    expect(value('GET', '/v1/nodes')).to.equal('list');
    expect(value('POST', '/v1/nodes/')).to.equal('create');
    expect(value('GET', '/V1/NODES')).to.equal('list');
    expect(value('GET', '/healthz')).to.equal('health');
  });

  it('captures parameters, URI-decoded, or as sent when the encoding is malformed', () => {
    expect(tree.match('GET', '/v1/nodes/node-1/logs/task-2')).to.deep.equal({ kind: 'found', value: 'log', params: { id: 'node-1', taskId: 'task-2' } });
    expect(tree.match('GET', '/v1/nodes/a%20b')).to.deep.include({ params: { id: 'a b' } });
    expect(tree.match('GET', '/v1/nodes/a%2Fb')).to.deep.include({ params: { id: 'a/b' } });
    expect(tree.match('GET', '/v1/nodes/%E0%A4%A')).to.deep.include({ params: { id: '%E0%A4%A' } });
    expect(tree.match('GET', '/v1/nodes/Node-Case')).to.deep.include({ params: { id: 'Node-Case' } });
  });

  it('prefers a static segment; the concrete path decides, so a method it lacks is not-allowed (no fall-back to the template)', () => {
    expect(value('POST', '/v1/nodes/token')).to.equal('token');
    expect(tree.match('GET', '/v1/nodes/token')).to.deep.equal({ kind: 'method-not-allowed', allowed: ['POST'] });
    expect(tree.match('GET', '/v1/nodes/tokens')).to.deep.equal({ kind: 'found', value: 'get', params: { id: 'tokens' } });
  });

  it('serves HEAD with the GET route', () => {
    expect(value('HEAD', '/v1/nodes/x')).to.equal('get');
  });

  it('answers method-not-allowed with every method the path has (HEAD with GET), and not-found otherwise', () => {
    expect(tree.match('PUT', '/v1/nodes')).to.deep.equal({ kind: 'method-not-allowed', allowed: ['HEAD', 'GET', 'POST'] });
    expect(tree.match('PATCH', '/v1/nodes/token')).to.deep.equal({ kind: 'method-not-allowed', allowed: ['POST'] });
    expect(tree.match('PATCH', '/v1/nodes/x')).to.deep.equal({ kind: 'method-not-allowed', allowed: ['HEAD', 'GET', 'DELETE'] });
    expect(value('GET', '/v1/nodes/x/y')).to.equal('not-found');
    expect(value('GET', '/v1//nodes')).to.equal('not-found');
    expect(value('GET', '/v1/nodes//')).to.equal('not-found');
    expect(value('GET', '/')).to.equal('not-found');
  });

  it('names parameters after each route, where routes share a position', () => {
    const t = new RouteTree<string>();
    t.add('GET', '/v1/internal/tasks/{nodeId}', 'poll');
    t.add('POST', '/v1/internal/tasks/{taskId}/result', 'result');
    expect(t.match('GET', '/v1/internal/tasks/node-1')).to.deep.equal({ kind: 'found', value: 'poll', params: { nodeId: 'node-1' } });
    expect(t.match('POST', '/v1/internal/tasks/task-1/result')).to.deep.equal({ kind: 'found', value: 'result', params: { taskId: 'task-1' } });
  });

  it('keeps the first route registered for a method and path', () => {
    const t = new RouteTree<string>();
    t.add('GET', '/a/{x}', 'first');
    t.add('GET', '/a/{y}', 'second');
    expect(t.match('GET', '/a/1')).to.deep.equal({ kind: 'found', value: 'first', params: { x: '1' } });
  });
});

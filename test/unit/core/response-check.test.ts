import { expect } from 'chai';
import { Type } from '@sinclair/typebox';
import { HttpError } from '../../../core/errors.js';
import { Reply } from '../../../core/http/reply.js';
import { responseCheck } from '../../../core/http/response-check.js';
import { defineRoute, type RouteDef } from '../../../core/plugin.js';

const route = defineRoute({
  method: 'GET',
  path: '/v1/things/{id}',
  auth: 'authenticated',
  summary: 'a thing',
  schemas: { response: Type.Object({ id: Type.String(), size: Type.Integer() }, { additionalProperties: false }) },
  handler: () => ({ id: 'thing-1', size: 1 }),
}) as RouteDef;

const failure = (check: (result: unknown) => void, result: unknown) => {
  try {
    check(result);
  } catch (err) {
    return err as HttpError;
  }
  return null;
};

describe('answers checked against their declared response schema in tests (core/http/response-check.ts)', () => {
  it('passes an answer that matches, as a plain value, a Reply and a page', () => {
    const check = responseCheck(route)!;
    expect(failure(check, { id: 'thing-1', size: 2 })).to.equal(null);
    expect(failure(check, Reply.created({ id: 'thing-1', size: 2 }))).to.equal(null);
    const list = responseCheck({ ...route, schemas: { response: Type.Array(Type.String()) } })!;
    expect(failure(list, Reply.page({ items: ['a', 'b'], next_cursor: null }))).to.equal(null);
  });

  it('fails an answer that does not match with a 500 naming the route and the paths, not the values', () => {
    const check = responseCheck(route)!;
    const err = failure(check, { id: 'thing-1', size: 'big-secret-value', extra: true });
    expect(err).to.be.instanceOf(HttpError);
    expect(err!.status).to.equal(500);
    expect(err!.message).to.contain('GET /v1/things/{id} does not match its declared response schema');
    expect(err!.message).to.contain('data.size');
    expect(err!.message).not.to.contain('big-secret-value');
    expect(failure(check, Reply.accepted({ id: 7, size: 1 }))?.message).to.contain('data.id');
  });

  it('checks the whole body of a route whose schema describes it (the login API answers {token, data})', () => {
    const login = responseCheck({ ...route, schemas: { response: Type.Object({ token: Type.String(), data: Type.Object({ userid: Type.String() }) }, { additionalProperties: false }) } })!;
    expect(failure(login, new Reply(200, { token: 't', data: { userid: 'u-1' } }))).to.equal(null);
    const err = failure(login, new Reply(200, { token: 't', data: { userid: 7 } }));
    expect(err?.status).to.equal(500);
    expect(err!.message).to.contain('data.');
  });

  it('leaves raw bodies, 204s and routes without a response schema unchecked', () => {
    const check = responseCheck(route)!;
    expect(failure(check, Reply.raw('not json', 'text/plain'))).to.equal(null);
    expect(failure(check, Reply.noContent())).to.equal(null);
    expect(responseCheck({ ...route, schemas: {} })).to.equal(null);
  });
});

import { expect } from 'chai';
import { Writable } from 'node:stream';
import { createLogger } from '../../../core/log.js';

/** A logger writing into an array of parsed lines. */
function capture() {
  const lines: Record<string, any>[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  });
  return { log: createLogger('info', sink as never), lines };
}

describe('log lines: secrets redacted', () => {
  it('replaces secret keys at the top level and two levels down, in objects and arrays', () => {
    const { log, lines } = capture();
    log.info(
      {
        password: 'p1',
        user: { name: 'ann', token: 't1', nested: { secret: 's1', deeper: { password: 'kept-at-depth-3' } } },
        items: [{ authorization: 'Bearer x' }, { name: 'ok' }],
        'x-signature': 'sig',
      },
      'hello',
    );
    const line = lines[0]!;
    expect(line.msg).to.equal('hello');
    expect(line.password).to.equal('[redacted]');
    expect(line['x-signature']).to.equal('[redacted]');
    expect(line.user).to.deep.include({ name: 'ann', token: '[redacted]' });
    expect(line.user.nested.secret).to.equal('[redacted]');
    // Three levels below the line: outside the documented reach (k, *.k, *.*.k).
    expect(line.user.nested.deeper.password).to.equal('kept-at-depth-3');
    expect(line.items).to.deep.equal([{ authorization: '[redacted]' }, { name: 'ok' }]);
  });

  it('redacts child bindings too, and never changes the objects it was given', () => {
    const { log, lines } = capture();
    const given = { request: { token: 'abc', path: '/v1/x' } };
    log.child({ secret_key: 'sk', listener: 'control' }).info(given, 'line');
    expect(lines[0]).to.deep.include({ secret_key: '[redacted]', listener: 'control' });
    expect(lines[0]!.request).to.deep.equal({ token: '[redacted]', path: '/v1/x' });
    expect(given.request.token, 'the caller keeps its value').to.equal('abc');
  });

  it('leaves lines without secrets as they are, errors included', () => {
    const { log, lines } = capture();
    log.error({ status: 500, err: new Error('boom'), route: { path: '/v1/nodes', method: 'GET' } }, 'failed');
    expect(lines[0]).to.deep.include({ status: 500, msg: 'failed', level: 'error', service: 'hangar' });
    expect(lines[0]!.err).to.include({ type: 'Error', message: 'boom' });
    expect(lines[0]!.route).to.deep.equal({ path: '/v1/nodes', method: 'GET' });
  });
});

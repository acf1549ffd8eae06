import { expect } from 'chai';
import { createHmac } from 'node:crypto';
import { canonicalQuery, canonicalString, signRequest, signature } from '../../../core/auth/hmac.js';

describe('HMAC canonical string', () => {
  it('is the documented seven lines', () => {
    const text = canonicalString({ method: 'post', pathAndQuery: '/v1/nodes?b=2&a=1', body: '{"x":1}', timestamp: 1800000000, nonce: 'n1' });
    expect(text.split('\n')).to.deep.equal([
      'HANGAR-HMAC-SHA256',
      '1800000000',
      'n1',
      'POST',
      '/v1/nodes',
      'a=1&b=2',
      '5041bf1f713df204784353e82f6a4a535931cb64f1f4b4a5aeaffcb720918b22',
    ]);
  });

  it('sorts and encodes query parameters the same way whatever the client sent', () => {
    expect(canonicalQuery('z=1&a=b%20c&a=a&sp=x+y')).to.equal('a=a&a=b%20c&sp=x%20y&z=1');
    expect(canonicalQuery("q=it's(1)*")).to.equal('q=it%27s%281%29%2A');
    expect(canonicalQuery('')).to.equal('');
  });

  it('signs with HMAC-SHA256 of the secret over the canonical string', () => {
    const req = { method: 'GET', pathAndQuery: '/v1/nodes', timestamp: 1800000000, nonce: '' };
    const expected = createHmac('sha256', 'secret').update(canonicalString(req)).digest('hex');
    expect(signature('secret', req)).to.equal(expected);
    const headers = signRequest({ accessKeyId: 'HKEXAMPLE', secretAccessKey: 'secret' }, { method: 'GET', pathAndQuery: '/v1/nodes', timestamp: 1800000000, nonce: 'abc' });
    expect(headers).to.include({ 'X-Access-Key': 'HKEXAMPLE', 'X-Timestamp': '1800000000', 'X-Nonce': 'abc' });
    expect(headers['X-Signature']).to.equal(signature('secret', { ...req, nonce: 'abc' }));
  });
});

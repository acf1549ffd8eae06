import { expect } from 'chai';
import { AwsV4Signer } from 'aws4fetch';
import { amzDate, signS3Request, uriEncode } from '../../../core/s3/sigv4.js';

// The control plane's own SigV4 signer (core/s3/sigv4.ts, for a backup target's probe) signs as
// aws4fetch does — the signer the tests' S3 client uses, a development dependency only.
describe('S3 request signing (core/s3/sigv4.ts)', () => {
  const credentials = { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY' };
  const now = new Date('2026-11-28T06:32:47.123Z');

  for (const [method, path, body] of [
    ['PUT', '/bucket/backups/.hangar-probe-0a1b', Buffer.from('probe bytes')],
    ['GET', '/bucket/a%20b/c%21d', undefined],
    ['DELETE', '/bucket/key?versionId=x%2By&acl=', undefined],
  ] as const) {
    it(`${method} ${path}: the same Authorization header as aws4fetch`, async () => {
      const url = new URL(`http://127.0.0.1:8333${path}`);
      const ours = signS3Request({ method, url, region: 'us-east-1', credentials, body: body ? Buffer.from(body) : undefined, now });
      const theirs = await new AwsV4Signer({
        method,
        url: url.toString(),
        headers: { 'x-amz-date': amzDate(now), 'x-amz-content-sha256': ours['x-amz-content-sha256']! },
        body: body ? Buffer.from(body) : undefined,
        accessKeyId: credentials.accessKeyId,
        secretAccessKey: credentials.secretAccessKey,
        service: 's3',
        region: 'us-east-1',
        datetime: amzDate(now),
      }).sign();
      expect(ours.authorization).to.equal(theirs.headers.get('authorization'));
      expect(ours['x-amz-date']).to.equal('20261128T063247Z');
    });
  }

  it('encodes path segments as SigV4 wants (RFC 3986, !\'()* too)', () => {
    expect(uriEncode("a b!'()*~._-/")).to.equal('a%20b%21%27%28%29%2A~._-%2F');
  });
});

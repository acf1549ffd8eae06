import { expect } from 'chai';
import { createHash, randomBytes } from 'node:crypto';
import { S3Error } from '../../support/s3-client.js';
import { S3_START_TIMEOUT_MS, S3Server, s3Availability } from '../../support/s3-server.js';
import { requireService } from '../../support/requirements.js';

const sha256 = (data: Buffer): string => createHash('sha256').update(data).digest('hex');

/** The S3 error an operation ends with (fails the test when it succeeds). */
async function refusal(operation: Promise<unknown>): Promise<S3Error> {
  try {
    await operation;
  } catch (error) {
    if (error instanceof S3Error) return error;
    throw error;
  }
  expect.fail('the request was accepted');
}

// The real S3 server the backup work and the lab's object stores build on: SeaweedFS's S3 gateway
// (weed server -s3, built from the Go module proxy by scripts/s3-build.sh) on loopback, spoken to
// with signed requests (AWS Signature Version 4) as any S3 client does.
describe('S3 server (SeaweedFS, built from the Go module proxy): real S3 with per-run credentials', function () {
  let s3: S3Server;

  before(async function () {
    this.timeout(S3_START_TIMEOUT_MS);
    const available = s3Availability();
    requireService(this, available.ok, available.why);
    s3 = await S3Server.start();
    console.log(`      weed answered S3 in ${s3.startSeconds.toFixed(1)} s`);
  });
  after(async function () {
    this.timeout(30_000);
    await s3?.stop();
  });

  it('creates a bucket, puts, gets, lists and deletes objects', async function () {
    this.timeout(60_000);
    const bucket = await s3.bucket('photos');
    expect(await s3.client().listBuckets()).to.include('photos');
    await bucket.put('2024/cat.txt', 'a cat');
    await bucket.put('2024/dog.txt', 'a dog');
    await bucket.put('notes.txt', 'notes');
    expect((await bucket.get('2024/cat.txt')).toString()).to.equal('a cat');
    expect(await bucket.list()).to.deep.equal(['2024/cat.txt', '2024/dog.txt', 'notes.txt']);
    expect(await bucket.list('2024/')).to.deep.equal(['2024/cat.txt', '2024/dog.txt']);
    await bucket.put('notes.txt', 'notes, second version');
    expect((await bucket.get('notes.txt')).toString(), 'a put replaces').to.equal('notes, second version');

    await bucket.delete('2024/cat.txt');
    expect(await bucket.list()).to.deep.equal(['2024/dog.txt', 'notes.txt']);
    const gone = await refusal(bucket.get('2024/cat.txt'));
    expect([gone.status, gone.code]).to.deep.equal([404, 'NoSuchKey']);
  });

  it('keeps a 6 MB object whole (stored in chunks, read back byte for byte)', async function () {
    this.timeout(60_000);
    const bucket = await s3.bucket();
    const data = randomBytes(6 * 1024 * 1024);
    await bucket.put('big.bin', data);
    const read = await bucket.get('big.bin');
    expect(read.length).to.equal(data.length);
    expect(sha256(read)).to.equal(sha256(data));
  });

  it('answers only requests signed with this run’s credentials', async function () {
    this.timeout(30_000);
    const bucket = await s3.bucket();
    await bucket.put('secret.txt', 'only for the key holder');
    const client = s3.client();
    const path = `/${bucket.name}/secret.txt`;
    const unsigned = await client.request('GET', path, { unsigned: true });
    expect(unsigned.status, unsigned.text).to.equal(403);
    expect(unsigned.text).to.contain('AccessDenied');
    const wrongSecret = await client.request('GET', path, { credentials: { ...s3.credentials, secretAccessKey: 'not-the-secret-0123456789' } });
    expect(wrongSecret.status, wrongSecret.text).to.equal(403);
    expect(wrongSecret.text).to.contain('SignatureDoesNotMatch');
    const unknownKey = await client.request('GET', path, { credentials: { accessKeyId: 'nobody-here', secretAccessKey: s3.credentials.secretAccessKey } });
    expect(unknownKey.status, unknownKey.text).to.equal(403);
    expect(unknownKey.text).to.contain('InvalidAccessKeyId');
    const refusedPut = await client.request('PUT', `/${bucket.name}/intruder.txt`, { body: 'x', unsigned: true });
    expect(refusedPut.status).to.equal(403);
    expect(await bucket.list(), 'nothing written by the refused put').to.deep.equal(['secret.txt']);
  });

  it('deletes an empty bucket, and refuses to delete one holding objects', async function () {
    this.timeout(30_000);
    const bucket = await s3.bucket();
    await bucket.put('keep.txt', 'kept');
    const refused = await refusal(s3.client().deleteBucket(bucket.name));
    expect([refused.status, refused.code]).to.deep.equal([409, 'BucketNotEmpty']);
    await bucket.delete('keep.txt');
    await s3.client().deleteBucket(bucket.name);
    expect(await s3.client().listBuckets()).not.to.include(bucket.name);
  });
});

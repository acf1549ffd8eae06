import { expect } from 'chai';
import { describeEachDialect } from '../../support/dialects.js';
import type { TestHangar } from '../../support/hangar.js';
import { startHangarWithProvider, type TestProvider } from '../../support/oidc-provider.js';

/**
 * The public routes that begin an SSO login store a row each (and the device one asks the provider
 * with the client secret): a cap on the logins under way (503) and a count per client address (429),
 * both with Retry-After.
 */
describeEachDialect('single sign-on: limits on logins begun', (dialect) => {
  let idp: TestProvider;
  let t: TestHangar;

  before(async function () {
    this.timeout(30_000);
    ({ idp, t } = await startHangarWithProvider(dialect, {
      plugins: ['system', 'iam'],
      oidc: { max_open_logins: 2, logins_begun_per_address: { max: 4, window_seconds: 600 } },
    }));
  });
  after(async () => {
    await t?.stop();
    await idp?.stop();
  });

  it('refuses a login past iam.oidc.max_open_logins (503), then any from an address past its count (429), the device flow too', async function () {
    this.timeout(20_000);
    for (let i = 0; i < 2; i++) expect((await t.request('GET', '/v1/auth/oidc/start')).status).to.equal(302);
    const full = await t.request('GET', '/v1/auth/oidc/start');
    expect(full.status, full.text).to.equal(503);
    expect(full.json.message).to.match(/^Too many SSO logins under way \(2, iam\.oidc\.max_open_logins\); try again in \d+ s$/);
    expect(Number(full.headers['retry-after'])).to.be.within(1, 600);
    const fullDevice = await t.request('POST', '/v1/auth/oidc/device', { body: {} });
    expect(fullDevice.status, fullDevice.text).to.equal(503);

    const limited = await t.request('GET', '/v1/auth/oidc/start');
    expect(limited.status, limited.text).to.equal(429);
    expect(limited.json.message).to.match(/^Too many SSO logins begun from this address \(iam\.oidc\.logins_begun_per_address\); try again in \d+ s$/);
    expect(Number(limited.headers['retry-after'])).to.be.within(1, 600);
    expect((await t.request('POST', '/v1/auth/oidc/device', { body: {} })).status).to.equal(429);
  });
});

import { expect } from 'chai';
import type { Page } from 'playwright-core';
import { openBrowser, requireBrowser } from '../support/browser.js';
import { TestDialect } from '../support/dialects.js';
import type { TestHangar } from '../support/hangar.js';
import { bearer, bootstrapAdmin, type Credentials } from '../support/identity.js';
import { startHangarWithProvider, type TestProvider } from '../support/oidc-provider.js';

/**
 * The dashboard's "Sign in with SSO" in chromium: the login screen offers it when iam.oidc is set,
 * the browser goes to a real OpenID provider (oidc-provider, in-process on loopback), logs in on the
 * provider's own page, comes back through hangar's callback and lands on the dashboard as that user
 * with the role its groups give. SQLite; both dialects and the refusals are
 * test/integration/iam/sso.test.ts.
 */
describe('the dashboard in chromium: single sign-on [sqlite]', function () {
  this.timeout(60_000);
  const dialect = new TestDialect('sqlite');
  let idp: TestProvider;
  let t: TestHangar;
  let admin: Credentials;
  let page: Page;
  let shot: (name: string) => Promise<unknown>;
  let closeBrowser: (() => Promise<void>) | undefined;

  before(async function () {
    this.timeout(120_000);
    requireBrowser(this);
    ({ idp, t } = await startHangarWithProvider(dialect, {
      plugins: ['system', 'iam', 'projects', 'audit', 'nodes', 'dashboard'],
      oidc: { roles: [{ group: 'ops', role: 'admin' }] },
    }));
    admin = await bootstrapAdmin(t);
    const opened = await openBrowser();
    ({ page, shot } = opened);
    closeBrowser = opened.close;
  });
  after(async function () {
    this.timeout(60_000);
    await closeBrowser?.();
    await t?.stop();
    await idp?.stop();
    await dialect.cleanup();
  });

  it('signs in with SSO at the provider’s page and lands on the dashboard as that user', async function () {
    idp.accounts.set('sonja', { groups: ['ops'], name: 'Sonja SSO' });
    await page.goto(`${t.url}/ui`);
    await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor();
    await shot('sso-login-screen');
    await page.getByRole('link', { name: 'Sign in with SSO' }).click();
    // The provider's own login page (oidc-provider's development interaction).
    await page.waitForURL((url) => url.origin === idp.issuer);
    await page.locator('input[name="login"]').fill('sonja');
    await page.locator('input[name="password"]').fill('whatever-the-provider-accepts');
    await page.getByRole('button', { name: 'Sign-in' }).click();
    await page.getByRole('heading', { name: 'Fleet' }).waitFor();
    expect(new URL(page.url()).origin).to.equal(t.url);
    expect(await page.getByText('Sonja SSO (admin)').count()).to.equal(1);
    await shot('sso-signed-in');
    const users = (await t.request('GET', '/v1/iam/users', { headers: bearer(admin.token) })).json.data as Array<{ username: string; role: string }>;
    expect(users.find((u) => u.username === 'sonja')?.role).to.equal('admin');
  });
});

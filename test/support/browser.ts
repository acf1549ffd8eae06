import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { requireService } from './requirements.js';

/** Debian's chromium (installed by .ci/run); HANGAR_CHROMIUM names another. */
export const CHROMIUM = process.env.HANGAR_CHROMIUM ?? '/usr/bin/chromium';
/** Flags that work as root in a container: no sandbox, no GPU, nothing phoning home. */
export const CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'];
export const ARTIFACTS = path.resolve('test-artifacts/dashboard');
export const UI_BUILT = () => existsSync(path.resolve('dist/ui/index.html'));
export const chromiumInstalled = () => existsSync(CHROMIUM);

/** Skips a dashboard suite loudly (a failure under HANGAR_REQUIRE_ALL=1) without chromium or the built dashboard. */
export function requireBrowser(ctx: Mocha.Context): void {
  requireService(ctx, chromiumInstalled(), `chromium at ${CHROMIUM} (apt-get install chromium)`);
  requireService(ctx, UI_BUILT(), 'the dashboard built (npm run build)');
}

/**
 * A headless chromium with a fresh profile (playwright makes a new temporary one per launch), and
 * one page in a context that takes the control plane's own CA on trust (as an operator clicking
 * through once).
 */
export async function openBrowser(): Promise<{ browser: Browser; page: Page; shot(name: string): Promise<unknown>; close(): Promise<void> }> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  const context = await browser.newContext({ ignoreHTTPSErrors: true, acceptDownloads: true, viewport: { width: 1360, height: 860 } });
  const page = await context.newPage();
  return {
    browser,
    page,
    shot: (name) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true }),
    close: () => browser.close(),
  };
}

/** Logs in on the dashboard's login screen and waits for the fleet view. */
export async function logIn(page: Page, url: string, username: string, password: string): Promise<void> {
  await page.goto(`${url}/ui`);
  await page.getByRole('heading', { name: 'Log in to hangar' }).waitFor();
  await page.getByLabel('Username').fill(username);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Fleet' }).waitFor();
}

/** A row of a named table, by text. */
export const tableRow = (page: Page, table: string, text: string) => page.getByRole('table', { name: table }).getByRole('row').filter({ hasText: text });
/** Follows a link of the main navigation. */
export const navigate = (page: Page, name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true }).click();

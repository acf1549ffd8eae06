import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { httpRequest, type HttpResponse } from '../core/http/client.js';
import { CLI_USER_AGENT } from './api-client.js';
import { connectionFile, readStoredConnection, resolveConnection, writeConnection } from './runner/connection.js';
import { EXIT, failure, runnerCommand, RunnerError, usageError } from './runner/errors.js';

interface LoginArgs {
  sso?: boolean;
  'api-url'?: string;
  'ca-file'?: string;
  verbose?: boolean;
}

interface DeviceStart {
  device_request: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string | null;
  expires_in: number;
  interval: number;
}

/** POST /v1/auth/oidc/device/token's answer: pending, or approved with the key. */
interface DeviceToken {
  status: 'pending' | 'approved';
  interval?: number;
  username: string;
  user_id: string;
  role: string;
  access_key_id: string;
  secret_access_key: string;
  expires_at: string;
  ca_pem: string | null;
}

/**
 * `hangar login --sso`: the OpenID provider's device flow, run by the control plane (which keeps
 * the client secret): prints where to approve the login and the code, polls until the user did,
 * and stores the expiring API key hangar answers as the connection (`hangar configure` stores).
 */
export const loginCommand = runnerCommand<LoginArgs>({
  command: 'login',
  describe: 'Log in through the single sign-on provider (device flow) and store the API key it gives in the user’s config dir',
  builder: (y) =>
    y
      .option('sso', { type: 'boolean', describe: 'log in at the OpenID provider hangar is configured with (iam.oidc): the only way so far', demandOption: true })
      .option('api-url', { type: 'string', describe: 'control API URL (default: the stored connection’s, or HANGAR_API_URL)' })
      .option('ca-file', { type: 'string', describe: 'PEM file of the control plane’s CA to pin (default: the stored one, HANGAR_CA_FILE, or the system’s CAs)' })
      .example('$0 login --sso --api-url https://cp.example.com:8443', 'open the URL it prints, enter the code, approve'),
  async run(args) {
    if (!args.sso) throw usageError('only --sso is supported: a password login is for the dashboard; the CLI uses API keys (hangar configure)');
    const known = resolveConnection();
    const apiUrl = (args['api-url'] ?? known.api_url)?.replace(/\/+$/, '');
    if (!apiUrl) throw usageError('give --api-url (the control API, e.g. https://cp.example.com:8443): no connection is stored yet');
    let ca: string | null = known.ca_pem ?? null;
    if (args['ca-file']) {
      try {
        ca = readFileSync(args['ca-file'], 'utf8');
      } catch (err) {
        throw usageError(`--ca-file ${args['ca-file']}: ${(err as Error).message}`);
      }
    }
    const post = async <T>(path: string, body: unknown): Promise<HttpResponse<{ data: T; message?: string }>> => {
      try {
        return await httpRequest(`${apiUrl}${path}`, { method: 'POST', body, ca: ca ?? undefined, headers: { 'user-agent': CLI_USER_AGENT } });
      } catch (err) {
        throw new RunnerError(`cannot reach ${apiUrl}: ${(err as Error).message}`, EXIT.network);
      }
    };
    const started = await post<DeviceStart>('/v1/auth/oidc/device', {});
    if (started.status !== 201) throw failure(`POST /v1/auth/oidc/device: HTTP ${started.status}: ${started.json?.message ?? started.text}`);
    const device = started.json!.data;
    console.log(`To log in, open ${device.verification_uri_complete ?? device.verification_uri}`);
    console.log(`and confirm the code ${device.user_code} (it expires in ${Math.round(device.expires_in / 60)} min).`);
    let interval = Math.max(1, device.interval);
    const deadline = Date.now() + device.expires_in * 1000;
    while (Date.now() < deadline) {
      await sleep(interval * 1000);
      const polled = await post<DeviceToken>('/v1/auth/oidc/device/token', { device_request: device.device_request });
      if (polled.status === 202) {
        interval = Math.max(1, Number(polled.json?.data?.interval ?? interval));
        continue;
      }
      if (polled.status !== 200) throw failure(`the login did not succeed: HTTP ${polled.status}: ${polled.json?.message ?? polled.text}`);
      const d = polled.json!.data;
      const stored = readStoredConnection();
      const file = writeConnection({
        api_url: apiUrl,
        access_key_id: d.access_key_id,
        secret_access_key: d.secret_access_key,
        ca_pem: ca ?? d.ca_pem ?? null,
        username: d.username,
        user_id: d.user_id,
        ...(typeof stored?.project === 'string' && stored.project ? { project: stored.project } : {}),
      });
      console.log(`logged in as ${d.username} (${d.role}); its API key ${d.access_key_id} expires ${d.expires_at}, saved to ${file}`);
      return EXIT.ok;
    }
    throw failure(`the code was not confirmed in time: run hangar login --sso again (connection left in ${connectionFile()} as it was)`);

  },
});

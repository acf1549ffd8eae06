import { expect } from 'chai';
import type { HttpError } from '../../../core/errors.js';
import type { ObjectKind, ResolvedObject } from '../../../plugins/secrets/api.js';
import { parseCompose } from '../../../drivers/swarm/compose-file.js';
import { decodeBase64Text, resolveObjects } from '../../../plugins/services/bundles.js';

const decodeComposeFile = (base64: string) => decodeBase64Text(base64, 'compose_file');

const STACK = 'hangar-shop';
const defaultDomain = (svc: string) => `${svc}.shop.lab.hangar.local`;
const parsed = (text: string) => parseCompose(text, STACK, defaultDomain);

/** The 400 a call throws (fails the test when it does not throw). */
function refusal(fn: () => unknown): HttpError {
  try {
    fn();
  } catch (err) {
    expect((err as HttpError).status, (err as Error).message).to.equal(400);
    return err as HttpError;
  }
  throw new Error('expected a 400');
}

const objects: Record<string, ResolvedObject> = {
  'secret:db-password': { id: 'sec-1', name: 'db-password', runtime_name: 'db-password-v3', version: 3 },
  'config:nginx.conf': { id: 'cfg-1', name: 'nginx.conf', runtime_name: 'nginx.conf-v1', version: 1 },
};
const resolve = async (kind: ObjectKind, name: string) => objects[`${kind}:${name}`] ?? null;

const FULL = `
x-common: &common
  image: busybox
  stop_grace_period: 1s
services:
  web:
    <<: *common
    command: ['sh', '-c', 'cat /run/secrets/db; sleep 3600']
    secrets: [db]
    configs:
      - source: site
        target: /etc/nginx/nginx.conf
    x-hangar:
      port: 8080
  api:
    image: busybox
    networks: [backend]
    deploy:
      replicas: 3
    x-hangar: { domain: API.Example.test, port: 9000 }
  agent:
    image: busybox
    deploy: { mode: global }
networks:
  backend: {}
secrets:
  db:
    name: db-password
configs:
  site:
    external: true
    name: nginx.conf
`;

describe('services: compose files (parse and check)', () => {
  it('decodes base64 (standard or URL-safe, line breaks allowed) and refuses anything else', () => {
    const text = 'services:\n  a:\n    image: busybox # ünïcode\n';
    const b64 = Buffer.from(text).toString('base64');
    expect(decodeComposeFile(b64)).to.equal(text);
    expect(decodeComposeFile(b64.replace(/(.{10})/g, '$1\n'))).to.equal(text);
    expect(decodeComposeFile(Buffer.from(text).toString('base64url'))).to.equal(text);
    expect(refusal(() => decodeComposeFile('services: {}')).message).to.contain('compose_file is not base64');
    expect(refusal(() => decodeComposeFile(Buffer.from([0xff, 0xfe, 0x00]).toString('base64'))).message).to.contain('UTF-8');
    expect(refusal(() => decodeComposeFile(Buffer.from('  \n').toString('base64'))).message).to.contain('empty');
  });

  it('names the line and column of a YAML error', () => {
    const err = refusal(() => parsed('services:\n  web:\n    image: busybox\n\tcommand: x\n'));
    expect(err.message).to.match(/^Validation failed: compose_file is not valid YAML: line 4, column \d+: /);
    expect(err.details).to.deep.equal([{ path: 'body.compose_file', message: err.message.replace('Validation failed: ', '') }]);
    expect(refusal(() => parsed('services: {}\n---\nservices: {}\n')).message).to.contain('line 2, column 1: a compose file is one YAML document');
    expect(refusal(() => parsed('services:\n  a: {image: x}\n  a: {image: y}\n')).message).to.contain('line 3');
  });

  it('needs a non-empty services map whose services each have an image; refuses compose 2.x and hangar labels', () => {
    expect(refusal(() => parsed('- a\n- b\n')).message).to.contain('must be a YAML map');
    expect(refusal(() => parsed('version: "3.8"\n')).message).to.contain('needs a non-empty services: map');
    expect(refusal(() => parsed('services: {}\n')).message).to.contain('needs a non-empty services: map');
    expect(refusal(() => parsed('services:\n  web:\n    command: sleep 1\n')).message).to.contain('service web has no image');
    expect(refusal(() => parsed('services:\n  web: busybox\n')).message).to.contain('service web must be a map');
    expect(refusal(() => parsed('version: "2.4"\nservices:\n  web: {image: x}\n')).message).to.contain('use version 3.x');
    expect(refusal(() => parsed('services:\n  "we b": {image: x}\n')).message).to.contain('service name "we b"');
    expect(refusal(() => parsed(`services:\n  ${'w'.repeat(60)}: {image: x}\n`)).message).to.contain('longer than 63 characters');
    expect(refusal(() => parsed('services:\n  web:\n    image: x\n    deploy: {labels: [io.hangar.role=instance]}\n')).message).to.contain("io.hangar.role are hangar's own");
  });

  it('says which named volumes each service mounts, by their engine names (what a restore of a hangar volume stops)', () => {
    const { mounts } = parsed(`services:
  db:
    image: x
    volumes: ["data:/var/lib/db", "/srv/host:/host", "./rel:/rel", "cache:/cache:ro"]
  worker:
    image: x
    volumes:
      - {type: volume, source: data, target: /data}
      - {type: bind, source: /etc, target: /etc2}
      - {type: tmpfs, target: /tmp}
  web:
    image: x
volumes:
  data: {external: true, name: hangar-vol-pgdata}
  cache: {}
`);
    expect(mounts).to.deep.equal({ db: ['hangar-vol-pgdata', 'hangar-shop_cache'], worker: ['hangar-vol-pgdata'], web: [] });
  });

  it('takes secrets and configs only as hangar objects, and only those the file declares', () => {
    for (const source of ['file: ./db.txt', 'environment: DB_PASSWORD']) {
      const err = refusal(() => parsed(`services:\n  web: {image: x, secrets: [db]}\nsecrets:\n  db:\n    ${source}\n`));
      expect(err.message).to.contain('compose secrets must be hangar secrets: create it with POST /v1/secrets');
    }
    expect(refusal(() => parsed('services:\n  web: {image: x}\nconfigs:\n  site:\n    file: ./nginx.conf\n')).message).to.contain('create it with POST /v1/configs');
    expect(refusal(() => parsed('services:\n  web: {image: x, secrets: [db]}\n')).message).to.contain('uses secret "db", which the top-level secrets: section does not declare');
    const entries = parsed(FULL).objects;
    expect(entries).to.deep.equal([
      { kind: 'secret', key: 'db', name: 'db-password' },
      { kind: 'config', key: 'site', name: 'nginx.conf' },
    ]);
  });

  it('reads x-hangar routes (domain defaulted from the service, stack and swarm) and refuses bad ones', () => {
    const p = parsed(FULL);
    expect(p.routes).to.deep.equal([
      { service: 'web', domain: 'web.shop.lab.hangar.local', port: 8080 },
      { service: 'api', domain: 'api.example.test', port: 9000 },
    ]);
    expect(p.desired).to.deep.equal({ web: 1, api: 3, agent: null });
    expect(refusal(() => parsed('services:\n  web: {image: x, x-hangar: {domain: a.test}}\n')).message).to.contain('x-hangar.port');
    expect(refusal(() => parsed('services:\n  web: {image: x, x-hangar: {port: 70000}}\n')).message).to.contain('x-hangar.port');
    expect(refusal(() => parsed('services:\n  web: {image: x, x-hangar: {port: 80, tls: true}}\n')).message).to.contain('unknown keys tls');
    expect(refusal(() => parsed('services:\n  web: {image: x, x-hangar: {port: 80, domain: "no spaces.test"}}\n')).message).to.contain('is not a DNS name');
    expect(refusal(() => parsed('services:\n  my_web: {image: x, x-hangar: {port: 80}}\n')).message).to.contain('x-hangar.domain must be given');
    const twice = 'services:\n  a: {image: x, x-hangar: {port: 80, domain: s.test}}\n  b: {image: x, x-hangar: {port: 80, domain: s.test}}\n';
    expect(refusal(() => parsed(twice)).message).to.contain('services a and b both claim the domain s.test');
  });

  it('resolves every object on the swarm; an unknown name is a 400 naming it', async () => {
    const p = parsed(FULL);
    const resolved = await resolveObjects(p, resolve, { noun: 'swarm', field: 'compose_file' });
    expect([...resolved.keys()]).to.deep.equal(['secret:db', 'config:site']);
    const unknown = parsed('services:\n  web: {image: x, secrets: [api_key]}\nsecrets:\n  api_key: {}\n');
    const err = await resolveObjects(unknown, resolve, { noun: 'swarm', field: 'compose_file' }).catch((e: HttpError) => e);
    expect((err as HttpError).status).to.equal(400);
    expect((err as HttpError).message).to.contain('secret api_key names no hangar secret "api_key" on this swarm: create it with POST /v1/secrets first');
  });
});

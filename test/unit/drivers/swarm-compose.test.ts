import { expect } from 'chai';
import { parse } from 'yaml';
import { renderCompose } from '../../../drivers/swarm/compose.js';

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

const OBJECTS = [
  { kind: 'secret' as const, key: 'db', name: 'db-password-v3' },
  { kind: 'config' as const, key: 'site', name: 'nginx.conf-v1' },
];

describe('drivers/swarm: a compose file rewritten for docker stack deploy', () => {
  it('version 3.8, external object versions under the compose keys, x-hangar out, routed services on hangar-edge and default', () => {
    const out = parse(renderCompose(FULL, OBJECTS, ['web', 'api']));
    expect(out.version).to.equal('3.8');
    expect(out.secrets).to.deep.equal({ db: { external: true, name: 'db-password-v3' } });
    expect(out.configs).to.deep.equal({ site: { external: true, name: 'nginx.conf-v1' } });
    expect(out.networks).to.deep.equal({ backend: {}, 'hangar-edge': { external: true } });
    expect(out.services.web).to.deep.equal({
      image: 'busybox',
      stop_grace_period: '1s',
      command: ['sh', '-c', 'cat /run/secrets/db; sleep 3600'],
      secrets: ['db'],
      configs: [{ source: 'site', target: '/etc/nginx/nginx.conf' }],
      networks: ['default', 'hangar-edge'],
    });
    expect(out.services.api.networks, 'an explicit list gains the edge network only').to.deep.equal(['backend', 'hangar-edge']);
    expect(out.services.agent).to.deep.equal({ image: 'busybox', deploy: { mode: 'global' } });
  });

  it('keeps a later 3.x, adds the edge network to a networks map, and adds no objects when there are none', () => {
    const rendered = parse(renderCompose('version: "3.9"\nservices:\n  a: {image: x, networks: {back: {aliases: [b]}}, x-hangar: {port: 1, domain: a.test}}\nnetworks: {back: {}}\n', [], ['a']));
    expect(rendered.version, 'a later 3.x stays').to.equal('3.9');
    expect(rendered.services.a.networks).to.deep.equal({ back: { aliases: ['b'] }, 'hangar-edge': null });
    expect(rendered).not.to.have.property('secrets');
  });
});

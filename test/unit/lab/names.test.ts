import { expect } from 'chai';
import { chooseLab, CLI_SUBNET_RANGE, defaultLabName, labNameProblem, subnetForLab } from '../../../lab/names.js';

/** The name and subnet `npm run lab` picks (lab/names.ts): one lab per person and checkout on a shared docker. */
describe('npm run lab: the lab’s name and subnet', () => {
  const inRange = (subnet: string) => {
    const m = /^172\.31\.(\d+)\.0\/24$/.exec(subnet);
    return m !== null && Number(m[1]) >= CLI_SUBNET_RANGE.first && Number(m[1]) < CLI_SUBNET_RANGE.first + CLI_SUBNET_RANGE.count;
  };

  it('names the lab after the user and the checkout: two people, or two checkouts, get two labs; the same one the same lab', () => {
    const alice = defaultLabName('alice', '/home/alice/hangar');
    expect(alice).to.match(/^cli-alice-[0-9a-f]{6}$/);
    expect(defaultLabName('alice', '/home/alice/hangar')).to.equal(alice);
    expect(defaultLabName('alice', '/home/alice/hangar/')).to.equal(alice);
    expect(defaultLabName('bob', '/home/alice/hangar')).to.match(/^cli-bob-/).and.not.equal(alice);
    expect(defaultLabName('alice', '/home/alice/hangar-2')).to.match(/^cli-alice-/).and.not.equal(alice);
  });

  it('keeps only lowercase letters, digits and dashes of a user name, and a name the lab accepts', () => {
    for (const user of ['Jean.Dupont', 'DOMAIN\\Jean_Dupont', 'ünïcode', '---', '', 'x'.repeat(200), 'a--b']) {
      const name = defaultLabName(user, '/srv/hangar');
      expect(name, user).to.match(/^cli-[a-z0-9]+(-[a-z0-9]+)*-[0-9a-f]{6}$/);
      expect(labNameProblem(name), user).to.equal(null);
    }
    expect(defaultLabName('Jean.Dupont', '/srv/hangar')).to.match(/^cli-jean-dupont-/);
    expect(defaultLabName('---', '/srv/hangar')).to.match(/^cli-user-/);
  });

  it('derives the subnet from the name, inside the documented range: the same name always the same /24, other names spread', () => {
    const names = Array.from({ length: 40 }, (_, i) => defaultLabName(`user${i}`, '/srv/hangar'));
    const subnets = names.map(subnetForLab);
    for (const s of subnets) expect(inRange(s), s).to.equal(true);
    expect(names.map(subnetForLab)).to.deep.equal(subnets);
    expect(new Set(subnets).size, 'forty labs on at least thirty /24s').to.be.greaterThan(30);
    // Apart from the test suites' labs (172.31.70–79.0/24).
    for (const s of subnets) expect(Number(s.split('.')[2])).to.be.at.least(128);
  });

  it('takes --name and --subnet, else HANGAR_LAB_SUBNET, else the name’s subnet', () => {
    const base = { user: 'alice', checkout: '/home/alice/hangar' };
    const fallback = chooseLab(base);
    expect(fallback).to.deep.equal({ name: defaultLabName('alice', '/home/alice/hangar'), nameFrom: 'default', subnet: subnetForLab(fallback.name), subnetFrom: 'name' });
    const named = chooseLab({ ...base, name: 'demo' });
    expect(named).to.include({ name: 'demo', nameFrom: '--name', subnet: subnetForLab('demo'), subnetFrom: 'name' });
    expect(chooseLab({ ...base, env: { HANGAR_LAB_SUBNET: '172.31.200.0/24' } })).to.include({ subnet: '172.31.200.0/24', subnetFrom: 'HANGAR_LAB_SUBNET' });
    expect(chooseLab({ ...base, subnet: '10.99.0.0/16', env: { HANGAR_LAB_SUBNET: '172.31.200.0/24' } })).to.include({ subnet: '10.99.0.0/16', subnetFrom: '--subnet' });
  });

  it('refuses a name or subnet the lab cannot take, saying which and why', () => {
    const base = { user: 'alice', checkout: '/srv/hangar' };
    expect(() => chooseLab({ ...base, name: 'My_Lab' })).to.throw('--name: a lab name is lowercase letters, digits and dashes');
    expect(() => chooseLab({ ...base, name: '-x' })).to.throw('--name:');
    expect(() => chooseLab({ ...base, name: 'x'.repeat(41) })).to.throw('at most 40 characters');
    expect(() => chooseLab({ ...base, subnet: '172.31.200.0/28' })).to.throw('--subnet: a lab subnet must be /24 or larger');
    expect(() => chooseLab({ ...base, subnet: 'nonsense' })).to.throw('--subnet: a subnet is an IPv4 CIDR');
    expect(() => chooseLab({ ...base, env: { HANGAR_LAB_SUBNET: '300.1.1.0/24' } })).to.throw('HANGAR_LAB_SUBNET: a subnet is an IPv4 CIDR');
  });
});

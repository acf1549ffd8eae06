import { expect } from 'chai';
import { orderPlugins } from '../../../core/assembly.js';
import { ConfigError } from '../../../core/errors.js';
import { defineServiceRef, type Plugin } from '../../../core/plugin.js';

const A = defineServiceRef<number>('a', 'the a service');
const B = defineServiceRef<number>('b', 'the b service');
const plugin = (name: string, parts: Partial<Plugin> = {}): Plugin => ({ name, setup: () => ({}), ...parts });
const names = (plugins: Plugin[]) => plugins.map((p) => p.name);

describe('plugin set-up order (orderPlugins)', () => {
  it('puts providers before their users and otherwise keeps the listed order', () => {
    const ordered = orderPlugins([plugin('x'), plugin('user', { deps: [A] }), plugin('y'), plugin('provider', { provides: [A] })]);
    expect(names(ordered)).to.deep.equal(['x', 'y', 'provider', 'user']);
  });

  it('orders by optional needs when their provider is loaded, and ignores them when it is not', () => {
    expect(names(orderPlugins([plugin('user', { optionalDeps: [A] }), plugin('provider', { provides: [A] })]))).to.deep.equal(['provider', 'user']);
    expect(names(orderPlugins([plugin('user', { optionalDeps: [A] }), plugin('other')]))).to.deep.equal(['user', 'other']);
  });

  it('refuses a need nobody provides, two providers of one thing and a cycle, naming them', () => {
    const fail = (plugins: Plugin[]) => {
      try {
        orderPlugins(plugins);
      } catch (err) {
        expect(err).to.be.instanceOf(ConfigError);
        return (err as Error).message;
      }
      throw new Error('expected a ConfigError');
    };
    expect(fail([plugin('user', { deps: [A] })])).to.equal('plugin user needs the a service (a), which no loaded plugin provides: add the plugin that provides it to plugins:');
    expect(fail([plugin('one', { provides: [A] }), plugin('two', { provides: [A] })])).to.equal('plugins one and two both provide the a service (a); load one of them');
    expect(fail([plugin('p', { provides: [A], deps: [B] }), plugin('q', { provides: [B], deps: [A] }), plugin('free')])).to.equal('plugins p, q depend on each other in a cycle');
  });
});

import { expect } from 'chai';
import { isPrivateAddress } from '../../../plugins/notifications/address.js';

/** The classifier that refuses webhook receivers (server-side request forgery), address by address. */
describe('notifications: private address classifier', () => {
  const refused = [
    '127.0.0.1',
    '10.1.2.3',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '::',
    '::1',
    'fe80::1%eth0',
    'fd00::1',
    'fec0::1',
    'ff02::1',
    '100::1',
    // IPv4 inside IPv6, dotted and hex.
    '::ffff:192.168.1.1',
    '::ffff:c0a8:101',
    '::ffff:0:127.0.0.1',
    '::ffff:0:7f00:1',
    '::127.0.0.1',
    '::7f00:1',
    '::8.8.8.8',
    '64:ff9b::127.0.0.1',
    '64:ff9b::7f00:1',
    '64:ff9b::a9fe:a9fe',
    '64:ff9b:1::808:808',
    '2002:7f00:1::',
    '2002:a00:1::1',
    '2001:0:4136:e378:8000:63bf:3fff:fdd2',
    '2001:db8::1',
    'not an address',
  ];
  const allowed = ['8.8.8.8', '1.1.1.1', '2606:4700:4700::1111', '::ffff:8.8.8.8', '::ffff:808:808', '64:ff9b::808:808', '2002:808:808::1', '2a00:1450:4001:80b::200e'];

  for (const address of refused) it(`refuses ${address}`, () => expect(isPrivateAddress(address)).to.equal(true));
  for (const address of allowed) it(`allows ${address}`, () => expect(isPrivateAddress(address)).to.equal(false));
});

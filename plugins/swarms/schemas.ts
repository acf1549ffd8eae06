import { Type } from '@sinclair/typebox';

/** A name that is also a DNS label (it appears in domains and runtime object names). */
export const DnsName = Type.String({ pattern: '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$', description: 'lowercase letters, digits and inner hyphens; at most 63 characters' });
export const NodeRef = Type.String({ pattern: '^node-[0-9a-z]+$' });
export const ForceQuery = Type.Object({ force: Type.Optional(Type.Boolean({ description: 'remove what runs on it as well' })) }, { additionalProperties: false });

import { Type, type Static } from '@sinclair/typebox';

export const PasswordPolicySchema = Type.Object(
  {
    MINIMUM_CHARS: Type.Integer({ minimum: 1, default: 12 }),
    REQUIRE_UPPERCASE: Type.Integer({ minimum: 0, default: 1, description: 'at least this many upper-case letters' }),
    REQUIRE_LOWERCASE: Type.Integer({ minimum: 0, default: 1 }),
    REQUIRE_SYMBOLS: Type.Integer({ minimum: 0, default: 1 }),
    REQUIRE_NUMBERS: Type.Integer({ minimum: 0, default: 1 }),
    ALLOW_WHITESPACE: Type.Integer({ minimum: 0, maximum: 1, default: 0 }),
    ALLOW_SEQUENTIAL: Type.Integer({ minimum: 0, maximum: 1, default: 0, description: 'runs like abc, 123, 321' }),
    ALLOW_REPEATED: Type.Integer({ minimum: 0, maximum: 1, default: 0, description: 'runs like aaa, ababab' }),
  },
  { additionalProperties: false, default: {} },
);

export type PasswordPolicy = Static<typeof PasswordPolicySchema>;

export const DEFAULT_PASSWORD_POLICY: PasswordPolicy = {
  MINIMUM_CHARS: 12,
  REQUIRE_UPPERCASE: 1,
  REQUIRE_LOWERCASE: 1,
  REQUIRE_SYMBOLS: 1,
  REQUIRE_NUMBERS: 1,
  ALLOW_WHITESPACE: 0,
  ALLOW_SEQUENTIAL: 0,
  ALLOW_REPEATED: 0,
};

const count = (password: string, re: RegExp) => (password.match(re) ?? []).length;

/** Three characters in a row that step by one, up or down, within letters or within digits. */
export function hasSequence(password: string): boolean {
  const chars = [...password.toLowerCase()];
  for (let i = 0; i + 2 < chars.length; i++) {
    const [a, b, c] = [chars[i]!, chars[i + 1]!, chars[i + 2]!];
    const sameClass = [a, b, c].every((x) => /[a-z]/.test(x)) || [a, b, c].every((x) => /[0-9]/.test(x));
    if (!sameClass) continue;
    const d1 = b.charCodeAt(0) - a.charCodeAt(0);
    const d2 = c.charCodeAt(0) - b.charCodeAt(0);
    if (d1 === d2 && Math.abs(d1) === 1) return true;
  }
  return false;
}

/** A unit of one or more characters repeated three times in a row: aaa, ababab. */
export function hasRepetition(password: string): boolean {
  return /(.+)\1\1/su.test(password);
}

/** Every rule the password breaks, as sentences; empty when it is acceptable. */
export function passwordProblems(password: string, policy: PasswordPolicy): string[] {
  const problems: string[] = [];
  const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? '' : 's'}`;
  if ([...password].length < policy.MINIMUM_CHARS) problems.push(`must be at least ${plural(policy.MINIMUM_CHARS, 'character')} long`);
  if (count(password, /\p{Lu}/gu) < policy.REQUIRE_UPPERCASE) problems.push(`must contain at least ${plural(policy.REQUIRE_UPPERCASE, 'uppercase letter')}`);
  if (count(password, /\p{Ll}/gu) < policy.REQUIRE_LOWERCASE) problems.push(`must contain at least ${plural(policy.REQUIRE_LOWERCASE, 'lowercase letter')}`);
  if (count(password, /\p{Nd}/gu) < policy.REQUIRE_NUMBERS) problems.push(`must contain at least ${plural(policy.REQUIRE_NUMBERS, 'number')}`);
  if (count(password, /[^\p{L}\p{Nd}\s]/gu) < policy.REQUIRE_SYMBOLS) problems.push(`must contain at least ${plural(policy.REQUIRE_SYMBOLS, 'symbol')}`);
  if (!policy.ALLOW_WHITESPACE && /\s/u.test(password)) problems.push('must not contain whitespace');
  if (!policy.ALLOW_SEQUENTIAL && hasSequence(password)) problems.push('must not contain sequential characters (like abc, 123 or 321)');
  if (!policy.ALLOW_REPEATED && hasRepetition(password)) problems.push('must not contain repeated characters (like aaa or ababab)');
  return problems;
}

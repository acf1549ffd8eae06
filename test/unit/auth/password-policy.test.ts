import { expect } from 'chai';
import { DEFAULT_PASSWORD_POLICY, hasRepetition, hasSequence, passwordProblems } from '../../../core/auth/password-policy.js';

describe('password policy', () => {
  const policy = DEFAULT_PASSWORD_POLICY;

  it('accepts a password that keeps every default rule', () => {
    expect(passwordProblems('Correct-Horse-97-Battery!', policy)).to.deep.equal([]);
  });

  const cases: Array<[string, string, string]> = [
    ['MINIMUM_CHARS', 'Sh0rt!Pw', 'at least 12 characters'],
    ['REQUIRE_UPPERCASE', 'no-upper-case-97!', 'uppercase letter'],
    ['REQUIRE_LOWERCASE', 'NO-LOWER-CASE-97!', 'lowercase letter'],
    ['REQUIRE_NUMBERS', 'No-Numbers-Here!', 'number'],
    ['REQUIRE_SYMBOLS', 'NoSymbolsHere97x', 'symbol'],
    ['ALLOW_WHITESPACE', 'Has Space-97-Ok!', 'whitespace'],
    ['ALLOW_SEQUENTIAL', 'Seq-abc-97-Pass!', 'sequential'],
    ['ALLOW_SEQUENTIAL', 'Seq-321-Pass-Wd!', 'sequential'],
    ['ALLOW_REPEATED', 'Rep-aaa-97-Pass!', 'repeated'],
    ['ALLOW_REPEATED', 'Rep-ababab-9-Pw!', 'repeated'],
  ];
  for (const [rule, password, words] of cases) {
    it(`${rule}: rejects ${JSON.stringify(password)}`, () => {
      const problems = passwordProblems(password, policy);
      expect(problems, rule).to.have.length(1);
      expect(problems[0]).to.contain(words);
    });
  }

  it('lists every rule a password breaks at once', () => {
    expect(passwordProblems('aaa 123', policy)).to.have.length(6);
  });

  it('honours a relaxed policy', () => {
    const relaxed = { ...policy, MINIMUM_CHARS: 4, REQUIRE_SYMBOLS: 0, ALLOW_WHITESPACE: 1, ALLOW_SEQUENTIAL: 1, ALLOW_REPEATED: 1 };
    expect(passwordProblems('Aa1 abc aaa', relaxed)).to.deep.equal([]);
    expect(passwordProblems('Aa1!', { ...policy, MINIMUM_CHARS: 4, REQUIRE_UPPERCASE: 2 })).to.deep.equal(['must contain at least 2 uppercase letters']);
  });

  it('finds runs of three: abc, cba, 123, 321, but not a-c or 135', () => {
    expect(['xabcx', 'XCBAx', '9123', '7321'].map(hasSequence)).to.deep.equal([true, true, true, true]);
    expect(['abd', 'a1b2c3', '135', 'az'].map(hasSequence)).to.deep.equal([false, false, false, false]);
  });

  it('finds units repeated three times: aaa, ababab, xyzxyzxyz, but not aa or abab', () => {
    expect(['aaa', 'ababab', 'xyzxyzxyz'].map(hasRepetition)).to.deep.equal([true, true, true]);
    expect(['aa', 'abab', 'abcabd'].map(hasRepetition)).to.deep.equal([false, false, false]);
  });
});

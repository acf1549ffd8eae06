import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'dist/', '.data/', '.tmp/', 'web/vendor/', 'web/src/api.gen.ts', 'test-artifacts/'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: { process: 'readonly', console: 'readonly', Buffer: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setInterval: 'readonly', clearInterval: 'readonly', URL: 'readonly', AbortController: 'readonly', structuredClone: 'readonly' },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
      'no-console': 'off',
    },
  },
  // Types stop at no edge of the product (docs/architecture.md, "Types at the edges"): no `any` in
  // core, plugins, drivers or the agent; a third party's type hole that must stay says why on an
  // eslint-disable-next-line. Tests, benches and the CLI's scripts are exempt.
  {
    files: ['core/**/*.ts', 'plugins/**/*.ts', 'drivers/**/*.ts', 'agent/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'error' },
  },
  // The layering (docs/architecture.md, "Layers and the rules that keep them"): core is the kernel
  // and imports none of the rooms built on it; a plugin reaches another plugin or a driver only
  // through its contract file (api.ts: refs, extension points, types, error classes), so importing a
  // contract never loads the provider; the agent does not reach into the CLI. Tests are exempt.
  {
    files: ['core/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        { regex: '^(\\.\\./)+(plugins|drivers|cli|agent)/', message: 'core imports no plugin, driver, CLI or agent module: declare a contract in core and let the composition root (cli/catalogue.ts) or the plugin plug into it.' },
      ] }],
    },
  },
  {
    files: ['plugins/*/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        { regex: '^\\.\\./(?!\\.\\./)[^/]+/(?!api\\.js$)', message: "another plugin is reached only through its contract file: import '../<plugin>/api.js' (move what you need there if it is missing)." },
        { regex: '^\\.\\./\\.\\./drivers/[^/]+/(?!api\\.js$)', message: "a driver is reached only through its contract file: import '../../drivers/<driver>/api.js'." },
        { regex: '^\\.\\./\\.\\./(cli|agent)/', message: 'plugins run in the control plane: they import no CLI or agent module.' },
      ] }],
    },
  },
  {
    files: ['agent/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        { regex: '^(\\.\\./)+(cli|plugins)/', message: 'the agent imports no CLI or plugin module (the CLI builds on the agent, not the other way round).' },
      ] }],
    },
  },
  {
    files: ['drivers/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        { regex: '^(\\.\\./)+(cli|plugins|agent)/', message: 'a driver imports only core and its own folder (the agent and the plugins import drivers, not the other way round).' },
      ] }],
    },
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // chai's property assertions (`.to.be.true`, `.to.exist`) are expressions by design.
      '@typescript-eslint/no-unused-expressions': 'off',
    },
  },
  {
    files: ['**/*.cjs'],
    languageOptions: { sourceType: 'commonjs', globals: { require: 'readonly', module: 'writable' } },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);

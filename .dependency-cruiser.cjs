/**
 * The architecture's boundaries (docs/architecture/overview.md), checked by
 * `make check`:
 * - kernel imports only node built-ins and kernel;
 * - platform imports kernel, platform and npm packages; the idempotency
 *   plugin (platform/http/idempotency) only the four kernel ports its
 *   README names (idempotency, txn, errs, ids) and npm packages, and the
 *   rest of the server's code reaches it only through its index.ts;
 * - a module imports kernel, platform, npm packages and itself, never another
 *   module, apps or test;
 * - only apps and test import a module, and only through its index.ts;
 * - the API client (apps/client) imports nothing of the server.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'kernel-is-pure',
      comment: 'kernel imports only node built-ins and kernel',
      severity: 'error',
      from: { path: '^kernel/', pathNot: ['\\.test\\.ts$'] },
      to: { pathNot: ['^kernel/'], dependencyTypesNot: ['core'] },
    },
    {
      name: 'platform-on-kernel-and-platform',
      comment: 'platform imports kernel, platform and npm packages',
      severity: 'error',
      from: { path: '^platform/', pathNot: ['\\.test\\.ts$'] },
      to: { path: '^(modules|apps|test|scripts)/' },
    },
    {
      name: 'idempotency-plugin-is-standalone',
      comment:
        'the idempotency plugin imports only the kernel ports its README names and npm packages, so it could be published as it is',
      severity: 'error',
      from: { path: '^platform/http/idempotency/', pathNot: ['\\.test\\.ts$'] },
      to: {
        path: '^(platform|modules|apps|test|scripts|kernel)/',
        pathNot: ['^platform/http/idempotency/', '^kernel/(idempotency|txn|errs|ids)/'],
      },
    },
    {
      name: 'idempotency-plugin-only-through-index',
      comment:
        'code outside the idempotency plugin imports it only through its entry points (index.ts, and in-memory.ts for tests), the two its package exports, so its internal files can change without breaking the server',
      severity: 'error',
      from: {
        path: '^(apps|kernel|platform|modules)/',
        pathNot: ['^platform/http/idempotency/', '\\.test\\.ts$'],
      },
      to: {
        path: '^platform/http/idempotency/',
        pathNot: ['^platform/http/idempotency/(index|in-memory)\\.ts$'],
      },
    },
    {
      name: 'client-is-standalone',
      comment:
        'the API client (apps/client) imports only node built-ins, npm packages and itself: its types come from the generated API document, so it never reaches into the server',
      severity: 'error',
      from: { path: '^apps/client/', pathNot: ['\\.test\\.ts$'] },
      to: { path: '^(apps|kernel|platform|modules|test|scripts)/', pathNot: ['^apps/client/'] },
    },
    {
      name: 'modules-are-isolated',
      comment: 'a module never imports another module',
      severity: 'error',
      from: { path: '^modules/([^/]+)/' },
      to: { path: '^modules/', pathNot: ['^modules/$1/'] },
    },
    {
      name: 'modules-do-not-import-apps-or-tests',
      severity: 'error',
      from: { path: '^modules/', pathNot: ['\\.test\\.ts$'] },
      to: { path: '^(apps|test|scripts)/' },
    },
    {
      name: 'modules-only-through-index',
      comment: 'apps and test import a module only through its index.ts',
      severity: 'error',
      from: { path: '^(apps|test|scripts)/' },
      to: { path: '^modules/[^/]+/.+', pathNot: ['^modules/[^/]+/index\\.ts$'] },
    },
    {
      name: 'production-code-does-not-import-tests',
      severity: 'error',
      from: { path: '^(apps|kernel|platform|modules)/', pathNot: ['\\.test\\.ts$'] },
      to: { path: ['^test/', '\\.test\\.ts$'] },
    },
    {
      name: 'kernel-tests-use-only-tap',
      comment: 'kernel tests may add the test runner, nothing else',
      severity: 'error',
      from: { path: '^kernel/.+\\.test\\.ts$' },
      to: {
        pathNot: ['^kernel/', '^node_modules/tap/', '^node_modules/@tapjs/'],
        dependencyTypesNot: ['core'],
      },
    },
    {
      name: 'not-to-unresolvable',
      severity: 'error',
      from: {},
      to: { couldNotResolve: true },
    },
    {
      name: 'no-circular',
      severity: 'error',
      from: {},
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    exclude: { path: ['^node_modules', '^dist/', '^test/fixtures/'] },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};

import { Type, type Static } from '@sinclair/typebox';

/** Schema of the core configuration. Plugins declare their own section (keyed by plugin name). */
export const CoreConfigSchema = Type.Object(
  {
    env: Type.String({ default: 'development', description: 'development | test | production, picks config/<env>.yaml' }),
    data_dir: Type.String({ minLength: 1, default: './.data', description: 'CA, certificates, SQLite file and generated secrets live here' }),
    api: Type.Object(
      {
        host: Type.String({ default: '0.0.0.0' }),
        port: Type.Integer({ minimum: 0, maximum: 65535, default: 8443 }),
        tls_cert: Type.Union([Type.String(), Type.Null()], { default: null, description: 'PEM file of an operator-provided server certificate (chain)' }),
        tls_key: Type.Union([Type.String(), Type.Null()], { default: null, description: 'PEM file of its private key' }),
        server_names: Type.Array(Type.String(), { default: [], description: 'extra DNS names / addresses for the generated server certificate' }),
        public_addresses: Type.Array(Type.String({ minLength: 1, maxLength: 253, pattern: '^[A-Za-z0-9.:_-]+$' }), {
          default: [],
          description:
            'addresses and DNS names machines and operators reach this control plane by (a public address, a NAT address, a DNS name): named in the server certificate, and the first is the address join commands use unless api.public_url is set',
        }),
        watch_addresses_seconds: Type.Integer({
          minimum: 0,
          default: 10,
          description: 'how often the generated server certificate is checked against the addresses this host has now; one it gained is added at once, without a restart (0: only at start)',
        }),
        public_url: Type.Union([Type.String(), Type.Null()], { default: null, description: 'URL operators and agents use to reach the API' }),
        body_limit: Type.String({ default: '1mb', pattern: '^\\d+(\\.\\d+)?\\s*(b|kb|mb|gb)?$', description: 'largest request body, e.g. 512kb, 1mb' }),
        unauthenticated_body_limit: Type.String({
          default: '64kb',
          pattern: '^\\d+(\\.\\d+)?\\s*(b|kb|mb|gb)?$',
          description: 'largest body of a request without credentials (login, join, bootstrap…); routes that need credentials read no body without them',
        }),
        unauthenticated_body_timeout_ms: Type.Integer({ minimum: 100, default: 10000, description: 'how long a request without credentials may take to send its body (then 408)' }),
        unauthenticated_bodies_in_flight: Type.Integer({ minimum: 1, default: 64, description: 'bodies of requests without credentials received at once, per listener (more get 503)' }),
        unauthenticated_bodies_per_address: Type.Integer({
          minimum: 1,
          default: 4,
          description: 'of those, how many one client address (an IPv6 /64) may send at once, per listener (more get 429): a client cannot take every slot',
        }),
        body_timeout_ms: Type.Integer({ minimum: 100, default: 30000, description: 'how long a request with credentials may take to send its body (then 408)' }),
        bodies_per_principal: Type.Integer({
          minimum: 1,
          default: 8,
          description: 'bodies one user (every credential of it together: its tokens, sessions and API keys) or machine may be sending at once, per listener (more get 429)',
        }),
        bodies_in_flight: Type.Integer({ minimum: 1, default: 128, description: 'bodies of requests with credentials received at once, per listener (more get 503)' }),
        request_timeout_ms: Type.Integer({ minimum: 0, default: 120000 }),
        agent_http2: Type.Boolean({
          default: true,
          description: 'answer agents that offer HTTP/2 over one HTTP/2 session each (false: HTTP/1.1 connections, as before); see docs/nodes.md',
        }),
        workers: Type.Integer({
          minimum: 1,
          maximum: 64,
          default: 1,
          description: 'processes serving the API on this machine (node:cluster; e.g. the number of cores); see docs/high-availability.md',
        }),
        trusted_proxies: Type.Array(Type.String({ minLength: 1 }), {
          default: [],
          description: 'addresses of reverse proxies whose X-Forwarded-For names the client (rate limits, logs and the loopback bootstrap use that address)',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    database: Type.Object(
      {
        url: Type.Union([Type.String(), Type.Null()], { default: null, description: 'postgres://… ; unset means the embedded SQLite file' }),
        schema: Type.Union([Type.String({ pattern: '^[a-z_][a-z0-9_]*$' }), Type.Null()], { default: null, description: 'PostgreSQL schema (search_path)' }),
        sqlite_file: Type.Union([Type.String(), Type.Null()], { default: null, description: 'defaults to <data_dir>/hangar.db' }),
        pool_max: Type.Integer({ minimum: 1, default: 10 }),
        acquire_timeout_seconds: Type.Integer({
          minimum: 1,
          maximum: 600,
          default: 60,
          description: 'PostgreSQL: how long a request waits for a free connection of the pool before it is answered 503 with Retry-After',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    log: Type.Object(
      {
        level: Type.Union(
          ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].map((l) => Type.Literal(l)),
          { default: 'info' },
        ),
      },
      { additionalProperties: false, default: {} },
    ),
    plugins: Type.Array(Type.String({ minLength: 1 }), {
      default: [],
      description: 'plugins to load: a built-in name or a module path; a plugin not listed is off',
    }),
    drivers: Type.Array(Type.String({ minLength: 1 }), { default: [], description: 'drivers to load, like plugins' }),
    secrets: Type.Object(
      {
        master_key: Type.Union([Type.String(), Type.Null()], {
          default: null,
          description: 'base64 key (32+ bytes, also HANGAR_SECRETS__MASTER_KEY) sealing the CA, JWT secret and sealing root kept in the database (shared by every control plane); required on PostgreSQL; unset: they are files in the data dir',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    mail: Type.Object(
      {
        host: Type.String({ default: '127.0.0.1', description: 'SMTP server' }),
        port: Type.Integer({ minimum: 1, maximum: 65535, default: 25 }),
        secure: Type.Boolean({ default: false, description: 'TLS from the first byte (port 465)' }),
        starttls: Type.Union([Type.Literal('off'), Type.Literal('opportunistic'), Type.Literal('required')], { default: 'opportunistic' }),
        user: Type.Union([Type.String(), Type.Null()], { default: null }),
        password: Type.Union([Type.String(), Type.Null()], { default: null }),
      },
      { additionalProperties: false, default: {} },
    ),
    tasks: Type.Object(
      {
        lease_seconds: Type.Integer({ minimum: 1, default: 120, description: 'how long an agent holds a task before it returns to pending (its heartbeats renew the lease)' }),
        max_hold_seconds: Type.Integer({ minimum: 1, default: 3600, description: 'heartbeats renew a held task’s lease until this long after it was queued; then it expires like any other' }),
        batch: Type.Integer({ minimum: 1, maximum: 100, default: 10, description: 'most tasks handed out per poll' }),
        poll_wait_seconds: Type.Integer({ minimum: 1, maximum: 120, default: 30, description: 'how long a long-poll is held open (in a fleet small enough; see max_polls_per_second); at least 1, or idle agents would poll without a pause' }),
        max_polls_per_second: Type.Number({
          exclusiveMinimum: 0,
          default: 50,
          description: 'empty long-polls a second the whole fleet may make: a larger fleet is told a longer wait (fleet ÷ this), from poll_wait_seconds up to max_poll_wait_seconds',
        }),
        max_poll_wait_seconds: Type.Integer({ minimum: 1, maximum: 120, default: 120, description: 'the longest long-poll wait a large fleet is told (balancers in front must allow requests this long)' }),
        expiry_check_ms: Type.Integer({ minimum: 100, default: 5000, description: 'how often expired leases are looked for' }),
      },
      { additionalProperties: false, default: {} },
    ),
    clusters: Type.Object(
      {
        call_timeout_seconds: Type.Integer({ minimum: 5, default: 180, description: 'how long hangar waits for an agent to run one orchestrator call' }),
        observe_interval_seconds: Type.Integer({ minimum: 1, default: 15, description: 'how often every active cluster is asked for the state of hangar’s workloads and of its nodes’ availability' }),
        revisions_kept: Type.Integer({ minimum: 1, maximum: 1000, default: 10, description: 'spec revisions kept per instance and service (the oldest go): GET …/revisions, POST …/rollback' }),
        local_domain: Type.String({
          default: 'hangar.local',
          pattern: '^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$',
          description: 'default domains of what runs on a cluster are <name>.<cluster>.<local_domain>',
        }),
        advertise: Type.Union([Type.Literal('overlay'), Type.Literal('address')], {
          default: 'overlay',
          description:
            'what cluster members (and NFS volumes) are reached at: a node’s WireGuard overlay address while its overlay is up with a peer answering, otherwise (or with address) its own address',
        }),
        join_path_wait_seconds: Type.Integer({
          minimum: 1,
          maximum: 3600,
          default: 90,
          description: 'how long a joining node tries to reach a manager (a WireGuard handshake over the overlay, then a TCP connection) before its join fails',
        }),
        op_lease_seconds: Type.Integer({
          minimum: 2,
          default: 30,
          description: 'an operation (a deploy, a removal…) holds its record this long unless its control plane renews it; then another takes it over',
        }),
        pickup_timeout_seconds: Type.Integer({
          minimum: 1,
          default: 20,
          description: 'a call a cluster manager’s agent has not taken after this long goes to the cluster’s next manager',
        }),
        availability_wait_seconds: Type.Integer({
          minimum: 0,
          maximum: 300,
          default: 10,
          description:
            'how long a cordon, drain or uncordon of a cluster member waits for its cluster before answering 202 with the call’s task (a drain that must wait for evictions takes longer)',
        }),
        drain_timeout_seconds: Type.Integer({
          minimum: 1,
          maximum: 3600,
          default: 60,
          description: 'how long a drain keeps asking for evictions a PodDisruptionBudget refuses, and waits for evicted pods to go, before it fails (Kubernetes)',
        }),
      },
      { additionalProperties: false, default: {} },
    ),
    terminal: Type.Object(
      { helpers: Type.Union([Type.String(), Type.Null()], { default: null, description: 'project helper script run before `hangar terminal` (default config/terminal.ts)' }) },
      { additionalProperties: false, default: {} },
    ),
    shutdown_timeout_ms: Type.Integer({ minimum: 0, default: 10000 }),
  },
  { additionalProperties: true },
);

export type CoreConfig = Static<typeof CoreConfigSchema>;

/** The whole configuration: core keys plus one section per plugin. */
export type HangarConfig = CoreConfig & Record<string, unknown>;

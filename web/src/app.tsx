import { useEffect, useState } from 'preact/hooks';
import { can, forgetAccess, loadAccess, useAccess } from './access';
import { call, useCsrf, whenSignedOut } from './api';
import type { Route } from './api.gen';
import { startLive, stopLive, useLiveConnected } from './live';
import { href, useRoute } from './router';
import { Field, Notices, useAction } from './ui';
import { Alerts } from './views/alerts';
import { Backups } from './views/backups';
import { Fleet, NodeDetail } from './views/fleet';
import { Audit, Configs, Gateway, ObjectStores, Secrets, SshProfiles, UserDetail, Users, Volumes } from './views/resources';
import { Notifications } from './views/notifications';
import { ProjectDetail, Projects, ProjectSwitcher } from './views/projects';
import { KubernetesClusterDetail, KubernetesClusters } from './views/kubernetes';
import { InstanceDetail, Instances, ServiceDetail, Services, SwarmDetail, Swarms } from './views/workloads';

type User = { id: string; username: string; name?: string | null; role: string };

/** The main navigation: path, label, and the list a page shows when only some roles may read it (null: every user). */
const NAV: Array<[string, string, Route | null]> = [
  ['fleet', 'Fleet', null],
  ['alerts', 'Alerts', null],
  ['notifications', 'Notifications', 'GET /v1/notifications/channels'],
  ['projects', 'Projects', null],
  ['swarms', 'Swarms', null],
  ['kubernetes', 'Kubernetes', null],
  ['instances', 'Instances', null],
  ['services', 'Services', null],
  ['volumes', 'Volumes', null],
  ['backups', 'Backups', null],
  ['secrets', 'Secrets', null],
  ['configs', 'Configs', null],
  ['s3', 'Object stores', null],
  ['gateway', 'Gateway', null],
  ['users', 'Users & keys', null],
  ['ssh-profiles', 'SSH profiles', 'GET /v1/ssh-profiles'],
  ['audit', 'Audit log', 'GET /v1/audit'],
];

function View({ route, user }: { route: string[]; user: User }) {
  const [top, id] = route;
  switch (top) {
    case 'fleet':
      return <Fleet />;
    case 'nodes':
      return id ? <NodeDetail id={id} /> : <Fleet />;
    case 'alerts':
      return <Alerts admin={can('POST /v1/alerts/{id}/silence')} />;
    case 'notifications':
      return <Notifications />;
    case 'projects':
      return id ? <ProjectDetail id={id} /> : <Projects />;
    case 'swarms':
      return id ? <SwarmDetail id={id} /> : <Swarms />;
    case 'kubernetes':
      return id ? <KubernetesClusterDetail id={id} admin={user.role === 'admin'} /> : <KubernetesClusters />;
    case 'instances':
      return id ? <InstanceDetail id={id} /> : <Instances />;
    case 'services':
      return id ? <ServiceDetail id={id} /> : <Services />;
    case 'volumes':
      return <Volumes />;
    case 'backups':
      return <Backups />;
    case 'secrets':
      return <Secrets />;
    case 'configs':
      return <Configs />;
    case 's3':
      return <ObjectStores />;
    case 'gateway':
      return <Gateway />;
    case 'users':
      return id ? <UserDetail id={id} /> : can('GET /v1/iam/users') ? <Users /> : <UserDetail id={user.id} />;
    case 'ssh-profiles':
      return <SshProfiles />;
    case 'audit':
      return <Audit />;
    default:
      return <p>Nothing here. <a href={href('fleet')}>Go to the fleet</a>.</p>;
  }
}

function Shell({ user, onSignOut }: { user: User; onSignOut: () => void }) {
  const route = useRoute();
  const live = useLiveConnected();
  const access = useAccess();
  const [accessError, setAccessError] = useState<string | null>(null);
  useEffect(() => {
    startLive();
    loadAccess().catch((err: Error) => setAccessError(err.message));
    return stopLive;
  }, []);
  // A new view puts the keyboard focus on its heading.
  useEffect(() => document.getElementById('page-title')?.focus(), [route.join('/')]);
  return (
    <div class="shell">
      <a class="skip" href="#main" onClick={(e) => { e.preventDefault(); document.getElementById('page-title')?.focus(); }}>
        Skip to content
      </a>
      <header class="top">
        <a class="brand" href={href('fleet')}>
          hangar
        </a>
        <span class={`live ${live ? 'on' : 'off'}`} role="status">
          {live ? 'Live' : 'Reconnecting…'}
        </span>
        <ProjectSwitcher />
        <span class="who">
          {user.name ?? user.username} ({user.role})
        </span>
        <button type="button" class="small" onClick={onSignOut}>
          Log out
        </button>
      </header>
      <nav class="side" aria-label="Main">
        <ul>
          {NAV.filter(([, , reads]) => !reads || can(reads)).map(([path, label]) => (
            <li key={path}>
              <a href={href(path)} aria-current={route[0] === path || (path === 'fleet' && route[0] === 'nodes') ? 'page' : undefined}>
                {label}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main">
        {/* Every view is made anew for the chosen project: its lists are read again, narrowed to it. */}
        {access ? <View key={access.project ?? ''} route={route} user={user} /> : <p role={accessError ? 'alert' : undefined}>{accessError ?? 'Loading…'}</p>}
      </main>
      <Notices />
    </div>
  );
}

function Login({ onIn }: { onIn: (user: User, csrf: string) => void }) {
  const [error, setError] = useState<string | null>(null);
  const [sso, setSso] = useState(false);
  const [busy, run] = useAction();
  useEffect(() => {
    // Single sign-on (iam.oidc) is offered when configured: a plain navigation to the provider and back.
    call('GET /v1/bootstrap').then((boot) => setSso(boot.data.sso), () => undefined);
  }, []);
  return (
    <main class="center">
      <form
        class="card"
        aria-labelledby="login-title"
        onSubmit={(e) => {
          e.preventDefault();
          const f = new FormData(e.currentTarget as HTMLFormElement);
          void run(async () => {
            try {
              const res = await call('POST /v1/iam/session', { body: { username: String(f.get('username')), password: String(f.get('password')) } });
              onIn(res.data.user as User, res.data.csrf_token!);
            } catch (err) {
              setError((err as Error).message);
            }
          });
        }}
      >
        <h1 id="login-title">Log in to hangar</h1>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <Field label="Username">
          <input name="username" autocomplete="username" required autoFocus />
        </Field>
        <Field label="Password">
          <input name="password" type="password" autocomplete="current-password" required />
        </Field>
        <button type="submit" class="primary" disabled={busy}>
          Log in
        </button>
        {sso && (
          <p class="sso">
            <a href="/v1/auth/oidc/start">Sign in with SSO</a>
          </p>
        )}
      </form>
    </main>
  );
}

/** Claims a fresh install (from the machine itself), offers the CLI's connection file, then logs in. */
function FirstRun({ fromLoopback, onIn }: { fromLoopback: boolean; onIn: (user: User, csrf: string) => void }) {
  const [claimed, setClaimed] = useState<Record<string, any> | null>(null);
  const [password, setPassword] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, run] = useAction();
  const download = () => {
    const url = URL.createObjectURL(new Blob([JSON.stringify({ data: claimed }, null, 2)], { type: 'application/json' }));
    const a = Object.assign(document.createElement('a'), { href: url, download: 'connection.json' });
    a.click();
    URL.revokeObjectURL(url);
  };
  if (claimed) {
    return (
      <main class="center">
        <section class="card" aria-labelledby="claimed-title">
          <h1 id="claimed-title">hangar is yours</h1>
          <p>
            The first admin, <strong>{claimed.username}</strong>, exists. {claimed.password ? 'Its generated password is below: store it now, it is shown this once.' : ''}
          </p>
          {claimed.password && (
            <Field label="Generated password">
              <input readOnly value={claimed.password} />
            </Field>
          )}
          <p>The connection file holds an API key for the CLI (shown this once too): <code>hangar configure --from connection.json</code>.</p>
          <div class="buttons">
            <button type="button" onClick={download}>
              Download connection.json
            </button>
            <button
              type="button"
              class="primary"
              disabled={busy}
              onClick={() =>
                run(async () => {
                  const res = await call('POST /v1/iam/session', { body: { username: claimed.username, password: claimed.password ?? password } });
                  onIn(res.data.user as User, res.data.csrf_token!);
                })
              }
            >
              Continue to the dashboard
            </button>
          </div>
        </section>
      </main>
    );
  }
  return (
    <main class="center">
      <form
        class="card"
        aria-labelledby="first-title"
        onSubmit={(e) => {
          e.preventDefault();
          const f = new FormData(e.currentTarget as HTMLFormElement);
          const body: Record<string, string> = {};
          for (const k of ['username', 'email', 'password']) if (f.get(k)) body[k] = String(f.get(k));
          const secret = String(f.get('secret') ?? '');
          setPassword(body.password ?? '');
          void run(async () => {
            try {
              const res = await fetch('/v1/bootstrap', { method: 'POST', headers: { 'content-type': 'application/json', ...(secret ? { 'x-bootstrap-secret': secret } : {}) }, body: JSON.stringify(body) });
              const json = await res.json();
              if (!res.ok) throw new Error(json.message);
              setClaimed(json.data);
            } catch (err) {
              setError((err as Error).message);
            }
          });
        }}
      >
        <h1 id="first-title">Claim this hangar</h1>
        <p>No admin exists yet. Create the first one.</p>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
        <Field label="Username">
          <input name="username" value="admin" required autocomplete="username" />
        </Field>
        <Field label="Email">
          <input name="email" type="email" autocomplete="email" />
        </Field>
        <Field label="Password" hint="leave empty to have one generated">
          <input name="password" type="password" autocomplete="new-password" />
        </Field>
        {!fromLoopback && (
          <Field label="Bootstrap secret" hint="printed by hangar serve at first start (and in the data dir); not needed from the machine itself">
            <input name="secret" required autocomplete="off" />
          </Field>
        )}
        <button type="submit" class="primary" disabled={busy}>
          Claim
        </button>
      </form>
    </main>
  );
}

export function App() {
  const [state, setState] = useState<{ kind: 'loading' } | { kind: 'first-run'; fromLoopback: boolean } | { kind: 'login' } | { kind: 'in'; user: User }>({ kind: 'loading' });
  const signIn = (user: User, csrf: string) => {
    useCsrf(csrf);
    setState({ kind: 'in', user });
  };
  useEffect(() => {
    whenSignedOut(() => {
      forgetAccess();
      setState({ kind: 'login' });
    });
    (async () => {
      try {
        const me = await call('GET /v1/iam/session');
        if (me.data.csrf_token) return signIn(me.data.user as User, me.data.csrf_token);
      } catch {
        /* not signed in */
      }
      const boot = await call('GET /v1/bootstrap');
      setState(boot.data.bootstrapped ? { kind: 'login' } : { kind: 'first-run', fromLoopback: boot.data.from_loopback });
    })();
  }, []);
  if (state.kind === 'loading') return <p class="boot">Loading hangar…</p>;
  if (state.kind === 'first-run') return <FirstRun fromLoopback={state.fromLoopback} onIn={signIn} />;
  if (state.kind === 'login') return <Login onIn={signIn} />;
  return (
    <Shell
      user={state.user}
      onSignOut={async () => {
        await call('DELETE /v1/iam/session').catch(() => undefined);
        useCsrf(null);
        forgetAccess();
        setState({ kind: 'login' });
      }}
    />
  );
}

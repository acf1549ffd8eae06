import { Type, type Static, type TObject, type TSchema } from '@sinclair/typebox';
import type { ValidateFunction } from 'ajv';
import { createAjv, describeErrors } from '../validation.js';
import { compareVersions } from '../version.js';

/**
 * Lanes: an agent runs the tasks of one lane one after the other, in the order they were queued,
 * and runs its lanes side by side. An OS upgrade of an hour (maintenance) therefore never holds up
 * an orchestrator call, and a deploy never holds up a log read.
 */
export const LANES = ['orchestrator', 'reads', 'host', 'maintenance'] as const;
export type Lane = (typeof LANES)[number];

/**
 * One kind of task an agent runs: what the control plane sends (payload) and what the agent
 * answers (result), both TypeBox schemas checked on both sides, the oldest agent that has it, and
 * the lane it runs in.
 */
export interface TaskKind<P extends TSchema = TSchema, R extends TSchema = TSchema> {
  /** The name on the wire, e.g. `os.update`. */
  readonly name: string;
  readonly description: string;
  readonly lane: Lane;
  readonly payload: P;
  readonly result: R;
  /** The oldest agent version that runs this kind; an older agent is refused with a 409 when it is queued. */
  readonly minAgentVersion: string;
  /**
   * Payload fields added after the kind itself, each with the first agent version that honours it.
   * An older agent would ignore such a field and do something else than asked (e.g. apply a
   * project's bundle with its own credentials), so a task that sets one is refused for it.
   */
  readonly fieldsSince?: Readonly<Record<string, string>>;
}

/**
 * What a task of kind `K` carries, from its declaration: a driver call's is the backend it is for and
 * the call's named input; any other kind's is its payload schema's type. `enqueue` and the agent's
 * executors are typed by it.
 */
export type PayloadOf<K extends TaskKind> = K extends DriverCall<string, infer I, TSchema> ? { backend: string } & Static<I> : Static<K['payload']>;
/** What the agent answers for a task of kind `K` (checked against the schema when it reports it). */
export type ResultOf<K extends TaskKind> = Static<K['result']>;

export function defineTaskKind<P extends TSchema, R extends TSchema>(kind: TaskKind<P, R>): TaskKind<P, R> {
  return Object.freeze({ ...kind });
}

/** The backend an orchestrator call is for: the agent picks its driver by this name (`swarm`, `k8s`). */
export const BackendName = Type.String({ pattern: '^[a-z][a-z0-9-]{0,31}$', description: 'the orchestrator backend whose driver runs the call' });

/**
 * A task that calls one method of a backend's driver on the agent: its payload is `backend` plus
 * the method's named input; the agent calls `driver[method](input)` and answers what it returns.
 */
export interface DriverCall<M extends string = string, I extends TObject = TObject, R extends TSchema = TSchema> extends TaskKind<TObject, R> {
  readonly method: M;
  readonly input: I;
}

export function defineDriverCall<const M extends string, I extends TObject, R extends TSchema>(
  call: Omit<DriverCall<M, I, R>, 'payload'>,
): DriverCall<M, I, R> {
  return Object.freeze({ ...call, payload: Type.Object({ backend: BackendName, ...call.input.properties }) });
}

export const isDriverCall = (kind: TaskKind): kind is DriverCall => typeof (kind as DriverCall).method === 'string';

/** The payload of a driver call: the backend whose driver runs it and the call's named input. */
export function callPayload<C extends DriverCall>(_call: C, backend: string, input: Static<C['input']>): PayloadOf<C> {
  // For a call type still generic here, PayloadOf<C> is a conditional type TypeScript leaves
  // unresolved, so the object (which is exactly its driver-call branch) is asserted to it.
  return { backend, ...input } as PayloadOf<C>;
}

/** The methods a driver implements for a list of calls: each takes the call's named input and answers its result. */
export type DriverMethods<Calls extends readonly DriverCall[]> = {
  [C in Calls[number] as C['method']]: (input: Static<C['input']>) => Promise<Static<C['result']>>;
};

/** What an agent says it can run, from its heartbeat. `kinds` is null for agents older than typed tasks. */
export interface AgentCapabilities {
  version: string;
  kinds: string[] | null;
  backends: string[];
}

/** Every kind both sides know, with compiled validators. */
export class TaskKindRegistry {
  private readonly kinds = new Map<string, TaskKind>();
  private readonly validators = new Map<string, { payload: ValidateFunction; result: ValidateFunction }>();
  private readonly ajv = createAjv();

  constructor(kinds: readonly TaskKind[] = []) {
    this.register(...kinds);
  }

  /** Adds kinds; a second, different kind under a name already taken is a programming error. */
  register(...kinds: TaskKind[]): this {
    for (const kind of kinds) {
      const existing = this.kinds.get(kind.name);
      if (existing && existing !== kind) throw new Error(`task kind ${kind.name} is defined twice`);
      this.kinds.set(kind.name, kind);
    }
    return this;
  }

  get(name: string): TaskKind | undefined {
    return this.kinds.get(name);
  }

  require(name: string): TaskKind {
    const kind = this.kinds.get(name);
    if (!kind) throw new Error(`unknown task kind ${JSON.stringify(name)} (known: ${this.names().join(', ')})`);
    return kind;
  }

  names(): string[] {
    return [...this.kinds.keys()].sort();
  }

  all(): TaskKind[] {
    return [...this.kinds.values()];
  }

  private compiled(kind: TaskKind) {
    let v = this.validators.get(kind.name);
    if (!v) {
      v = { payload: this.ajv.compile(kind.payload as object), result: this.ajv.compile(kind.result as object) };
      this.validators.set(kind.name, v);
    }
    return v;
  }

  /** What is wrong with a payload for this kind ("payload.spec.name is required; …"), or null. */
  checkPayload(kind: TaskKind, payload: unknown): string | null {
    const validate = this.compiled(kind).payload;
    return validate(payload ?? {}) ? null : describe(validate, 'payload');
  }

  /** What is wrong with an agent's answer for this kind, or null. */
  checkResult(kind: TaskKind, result: unknown): string | null {
    const validate = this.compiled(kind).result;
    return validate(result) ? null : describe(validate, 'result');
  }
}

function describe(validate: ValidateFunction, where: string): string {
  return describeErrors(validate.errors, where)
    .slice(0, 5)
    .map((d) => `${d.path} ${d.message}`)
    .join('; ');
}

/**
 * Why an agent with these capabilities cannot run `kind`, or null when it can (or when nothing is
 * known yet: an agent that never sent a heartbeat is judged by the agent itself).
 */
export function cannotRun(kind: TaskKind, capabilities: AgentCapabilities | null, payload?: Record<string, unknown>): string | null {
  if (!capabilities) {
    // An agent judged by itself, except for a field it may not know: that needs its version first.
    const field = Object.keys(kind.fieldsSince ?? {}).find((f) => isSet(payload?.[f]));
    return field ? `its agent has not reported its version yet, and ${kind.name}'s ${field} needs ${kind.fieldsSince![field]} or later: wait for its first heartbeat` : null;
  }
  if (compareVersions(capabilities.version, kind.minAgentVersion) < 0) {
    return `its agent (version ${capabilities.version}) is older than ${kind.name} needs (${kind.minAgentVersion} or later): update the agent first`;
  }
  for (const [field, since] of Object.entries(kind.fieldsSince ?? {})) {
    if (!isSet(payload?.[field])) continue;
    if (compareVersions(capabilities.version, since) < 0) {
      return `its agent (version ${capabilities.version}) would ignore ${kind.name}'s ${field} (agents ${since} or later honour it): update the agent first`;
    }
  }
  if (capabilities.kinds && !capabilities.kinds.includes(kind.name)) {
    return `its agent (version ${capabilities.version}) does not run ${kind.name}: update the agent first`;
  }
  return null;
}

/** A payload field an agent would act on: given, and not null or false. */
const isSet = (value: unknown) => value !== undefined && value !== null && value !== false;

/** Marks a payload field that carries a secret value (a task view never shows it; it may be sealed at rest). */
export function sensitive<T extends TSchema>(schema: T): T {
  return { ...schema, sensitive: true };
}

/**
 * `instanceof` for the classes a plugin hands back to core (errors it throws, replies it returns),
 * true across copies of the same module: an operator's plugin loaded from TypeScript next to the
 * production build imports `core/errors.ts` from the sources while core runs the compiled copy.
 * Instances carry a registry symbol (`Symbol.for`), the same in every copy; subclasses keep the
 * ordinary prototype check.
 */
export function brandClass(cls: { prototype: object }, name: string): void {
  const mark = Symbol.for(`hangar.${name}`);
  Object.defineProperty(cls.prototype, mark, { value: true });
  Object.defineProperty(cls, Symbol.hasInstance, {
    value(this: unknown, value: unknown): boolean {
      if (this !== cls) return Function.prototype[Symbol.hasInstance].call(this, value);
      return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[mark] === true;
    },
  });
}

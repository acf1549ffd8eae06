/** The error a promise rejects with, with the status code drivers put on it (fails the test when the promise resolves). */
export async function failureOf(promise: Promise<unknown>): Promise<Error & { statusCode?: number }> {
  try {
    await promise;
  } catch (err) {
    return err as Error & { statusCode?: number };
  }
  throw new Error('expected a failure, got a result');
}

import { Writable } from 'node:stream';
import { EXEC_OUTPUT_BYTES, type ExecInWorkload } from '../../core/orchestrator.js';
import type { Static } from '@sinclair/typebox';
import { attempt, checkName, SwarmDriverError, type Raw, type SwarmContext } from './client.js';

type ExecInput = Static<(typeof ExecInWorkload)['input']>;
type ExecResult = Static<(typeof ExecInWorkload)['result']>;

/** The end of a stream of bytes, at most `limit` of them: what a run keeps of a command's output. */
class Tail extends Writable {
  private chunks: Buffer[] = [];
  private held = 0;
  dropped = false;

  constructor(private readonly limit: number) {
    super();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, done: () => void): void {
    this.chunks.push(chunk);
    this.held += chunk.length;
    while (this.chunks.length > 1 && this.held - this.chunks[0]!.length >= this.limit) {
      this.held -= this.chunks.shift()!.length;
      this.dropped = true;
    }
    done();
  }

  text(): string {
    const all = Buffer.concat(this.chunks);
    if (all.length > this.limit) this.dropped = true;
    return all.subarray(Math.max(0, all.length - this.limit)).toString('utf8');
  }
}

/**
 * Runs a command in a running container of one of the workloads `names` on this engine (a swarm
 * service's task here), as `docker exec` does: no shell unless the command is one, no TTY, its
 * standard output and error kept together (their end). At its timeout the command's process is
 * killed (the agent shares the engine's process namespace on hangar's machines) and the answer says
 * it timed out. A container of none of them running here is an error saying so.
 */
export async function execInWorkload(ctx: SwarmContext, input: ExecInput): Promise<ExecResult> {
  const names = input.names.map((n) => checkName('service', n));
  let container: Raw | undefined;
  for (const name of names) {
    const running = (await attempt(`listing the containers of ${name}`, () =>
      ctx.docker.listContainers({ filters: { label: [`com.docker.swarm.service.name=${name}`], status: ['running'] } }),
    )) as Raw[];
    container = running.sort((a, b) => String(a.Id).localeCompare(String(b.Id)))[0];
    if (container) break;
  }
  if (!container) throw new SwarmDriverError(`no running container of ${names.join(', ')} on this machine (it stopped or moved meanwhile)`);
  const id = String(container.Id);
  const started = Date.now();
  const exec = await attempt(`starting the command in container ${id.slice(0, 12)}`, () =>
    ctx.docker.getContainer(id).exec({ Cmd: input.command, AttachStdout: true, AttachStderr: true, AttachStdin: false, Tty: false }),
  );
  const stream = await attempt(`starting the command in container ${id.slice(0, 12)}`, () => exec.start({ hijack: true, stdin: false }));
  const tail = new Tail(EXEC_OUTPUT_BYTES);
  ctx.docker.modem.demuxStream(stream, tail, tail);
  let timer: NodeJS.Timeout | undefined;
  const ended = new Promise<'ended'>((resolve) => {
    stream.on('end', () => resolve('ended'));
    stream.on('close', () => resolve('ended'));
    stream.on('error', () => resolve('ended'));
  });
  const outcome = await Promise.race([ended, new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), input.timeout_s * 1000)))]);
  clearTimeout(timer);
  let exitCode: number | null = null;
  if (outcome === 'timeout') {
    const state = (await exec.inspect().catch(() => null)) as Raw | null;
    const pid = Number(state?.Pid);
    if (pid > 0) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // Ended meanwhile, or in another process namespace: it is reported as timed out either way.
      }
    }
    (stream as unknown as { destroy?: () => void }).destroy?.();
  } else {
    // The stream ends as the process does; the engine records its exit code a moment later.
    for (let i = 0; i < 50; i++) {
      const state = (await attempt('reading the command’s exit code', () => exec.inspect())) as Raw;
      if (!state.Running && typeof state.ExitCode === 'number') {
        exitCode = state.ExitCode;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const output = tail.text();
  return { exit_code: exitCode, timed_out: outcome === 'timeout', output, truncated: tail.dropped, container: id.slice(0, 12), duration_seconds: (Date.now() - started) / 1000 };
}

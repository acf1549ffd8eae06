import { defineServiceRef } from '../../core/plugin.js';

/** The system plugin's contract: what other plugins import of it (importing this never loads the plugin). */

/** A compressed copy of an executable: its file, its Content-Encoding and its size. */
export interface CompressedBinary {
  file: string;
  encoding: string;
  size: number;
}

/** One built agent executable. */
export interface AgentExecutable {
  version: string;
  sha256: string;
  size: number;
  file: string;
  compressed: CompressedBinary | null;
}

/** The agent executables `npm run build` made. */
export interface AgentBinariesApi {
  /** The executable for an architecture (`amd64`, `arm64`), or null when none was built. */
  describe(arch: string): AgentExecutable | null;
}

/** What an operator does about a missing executable (the control plane serves what the build made). */
export const missingExecutable = (arch: string) =>
  `No agent executable for ${arch} has been built on this control plane: run npm run build there (both architectures; npm start builds only its own machine's), or node scripts/build.mjs agent ${arch}`;

/** The agent executables this control plane serves (`npm run build` puts them in dist/agent). */
export const AgentBinariesRef = defineServiceRef<AgentBinariesApi>('agent-binaries', 'the agent executables');

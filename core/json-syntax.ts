/** Where and why JSON.parse refused a text, as V8's message says it. */
export interface JsonSyntaxError {
  /** Line (from 1) of the position the parser named, or of the end of the text when it named none. */
  line: number;
  /** Column (from 1) on that line. */
  column: number;
  /** The parser named a position (`… in JSON at position N`). */
  positioned: boolean;
  /** The text ended before the JSON did. */
  ended: boolean;
  /** V8's reason without the position; it may quote the text (`Unexpected token 'p', "password=h"…`). */
  reason: string;
}

/** Where and why JSON.parse refused `text`: one reading of V8's message for the API's 400 and the CLI. */
export function jsonSyntaxError(text: string, err: unknown): JsonSyntaxError {
  const message = err instanceof Error ? err.message : String(err);
  const at = /at position (\d+)/.exec(message);
  const position = at ? Number(at[1]) : text.length;
  const before = text.slice(0, position);
  return {
    line: before.split('\n').length,
    column: position - before.lastIndexOf('\n'),
    positioned: Boolean(at),
    ended: /^Unexpected end of JSON input/.test(message),
    reason: message.replace(/ in JSON at position \d+.*$/s, ''),
  };
}

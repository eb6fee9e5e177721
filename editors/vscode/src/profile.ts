// "Profile this function": which function the cursor is in, and what to tell the user afterwards.
// Pure (no `vscode` import) so it is unit-tested.

export const PROFILE_COMMAND = "perflsp.profileFunction"; // the server's workspace/executeCommand
export const COMPILE_COMMAND = "perflsp.compileFunction"; // "Try torch.compile on this function"
export const BREAKS_COMMAND = "perflsp.findGraphBreaks"; // torch.compile's graph breaks only (explain)
export const RECORD_COMMAND = "perflsp.recordRun"; // "Record a run": `perflsp record`, args `[uri]`
/** Server commands that run the user's code (the code lens offers `profileAgain` after a first run). */
export const PROFILE_COMMANDS = [PROFILE_COMMAND, "perflsp.profileAgain", COMPILE_COMMAND, BREAKS_COMMAND, RECORD_COMMAND];

/** The progress notification's title while `command` runs on `name`. */
export function progressTitle(command: string, name: string): string {
  if (command === COMPILE_COMMAND) return `perflsp: trying torch.compile on ${name}`;
  if (command === BREAKS_COMMAND) return `perflsp: finding graph breaks in ${name}`;
  if (command === RECORD_COMMAND) return "perflsp: recording a run of the program";
  return `perflsp: measuring ${name}`;
}

const DEF = /^(\s*)(?:async\s+)?def\s+([A-Za-z_]\w*)\s*[([]/;
const CLASS = /^(\s*)class\s+([A-Za-z_]\w*)\s*[(:[]/;

function indentOf(line: string): number {
  let width = 0;
  for (const ch of line) {
    if (ch === " ") width += 1;
    else if (ch === "\t") width += 8 - (width % 8); // Python's tab rule
    else break;
  }
  return width;
}

function blank(line: string): boolean {
  const stripped = line.trim();
  return stripped === "" || stripped.startsWith("#");
}

/**
 * The qualified name (`Model.forward`, `train`) of the innermost function around `line` (0-based),
 * as the runtime's targets name it (`file.py:Class.method`); undefined outside any function.
 *
 * Indentation-based, like Python itself: no language server for Python is needed (code-server and
 * many VS Code setups have none). Continuation lines of a multi-line signature count as inside.
 * A function nested in another function cannot be a profiling target, so the outer one is chosen.
 */
export function enclosingFunction(lines: readonly string[], line: number): string | undefined {
  if (line < 0 || line >= lines.length) return undefined;
  // A blank or comment line belongs to the code above it (the function it trails), or else below.
  let at = line;
  while (at >= 0 && blank(lines[at])) at--;
  if (at < 0) {
    at = line;
    while (at < lines.length && blank(lines[at])) at++;
    if (at >= lines.length) return undefined;
  }
  // On a decorator: the function it decorates.
  if (lines[at].trim().startsWith("@")) {
    const indent = indentOf(lines[at]);
    let below = at + 1;
    while (below < lines.length && (blank(lines[below]) || lines[below].trim().startsWith("@") ||
           indentOf(lines[below]) > indent)) below++;
    if (below < lines.length && DEF.test(lines[below])) at = below;
  }
  let limit = indentOf(lines[at]);
  if (DEF.test(lines[at]) || CLASS.test(lines[at])) limit += 1; // on `def f(` itself: f encloses it
  // Scopes enclosing the cursor, innermost first.
  const scopes: Array<{ kind: "def" | "class"; name: string }> = [];
  for (let i = Math.min(at, lines.length - 1); i >= 0 && limit > 0; i--) {
    const text = lines[i];
    if (blank(text)) continue;
    const indent = indentOf(text);
    if (indent >= limit) continue;
    const def = DEF.exec(text);
    const cls = def ? null : CLASS.exec(text);
    if (def) scopes.push({ kind: "def", name: def[2] });
    else if (cls) scopes.push({ kind: "class", name: cls[2] });
    // Any line indented less than everything so far opens the next outer block; statements that
    // are not def/class (if, for, with) only lower the limit.
    limit = indent;
  }
  // From the outside in: Class.method, but only the outermost function of nested functions.
  const outer = scopes.reverse();
  const firstDef = outer.findIndex((s) => s.kind === "def");
  if (firstDef < 0) return undefined;
  return outer.slice(0, firstDef + 1).map((s) => s.name).join(".");
}

export interface ProfileMessage {
  text: string;
  failed: boolean;
  shownByServer: boolean; // the server already showed it (window/showMessage)
}

/**
 * One line for the user out of what `perflsp.profileFunction` returned. perflsp's server answers
 * `{status: "ok", regime, headline}` and, for anything else (`refused`, `busy`, `cancelled`,
 * `error`), `{status, message}` after showing that message itself. A bare profile result
 * (`verdict`, `error`) or a string are understood too.
 */
export function describeProfileResult(result: unknown): ProfileMessage {
  const plain = (text: string, failed = false): ProfileMessage => ({ text, failed, shownByServer: false });
  if (result === null || result === undefined) return plain("profiled; the findings are on the function's lines");
  if (typeof result === "string") return plain(result);
  if (typeof result !== "object") return plain(String(result));
  const r = result as Record<string, unknown>;
  if (typeof r.status === "string") {
    if (r.status === "ok") {
      const headline = typeof r.headline === "string" && r.headline ? r.headline : undefined;
      return plain(headline ?? (typeof r.regime === "string" ? r.regime : "profiled"));
    }
    const message = typeof r.message === "string" ? r.message : r.status;
    return { text: message, failed: r.status !== "cancelled", shownByServer: true };
  }
  const error = r.error as Record<string, unknown> | string | null | undefined;
  if (error) {
    const message = typeof error === "string" ? error : String(error.message ?? error.kind ?? "failed");
    return plain(`profiling failed: ${message}`, true);
  }
  const verdict = r.verdict as Record<string, unknown> | null | undefined;
  if (verdict && typeof verdict === "object") {
    const regime = typeof verdict.regime === "string" ? verdict.regime : undefined;
    const summary = typeof verdict.summary === "string" ? verdict.summary : undefined;
    if (regime || summary) return plain([regime, summary].filter(Boolean).join(": "));
  }
  for (const key of ["message", "summary"]) {
    if (typeof r[key] === "string") return plain(r[key] as string);
  }
  return plain(JSON.stringify(result));
}

// The `perflsp.*` VS Code settings and what the language server receives for them.
//
// Pure (no `vscode` import) so the mapping is unit-tested. The server reads the `perflsp` section
// through `workspace/configuration`: its own keys (`run`, `workspaceDiagnostics`, `logLevel`,
// `interpreter`, `profile.{enabled,timeout}`); every other key it receives overrides the
// kebab-case key of `[tool.perflsp]` (`select`, `ignore`, `severity`, `preview`) and is validated
// there, so an unknown key is an error. Hence `path` (how to start the server) is never forwarded, and a
// `[tool.perflsp]` override only when the user actually set it: a default `select: []` would
// otherwise switch every rule off over the project's own configuration.

import * as path from "node:path";

export const SECTION = "perflsp";

/** What `WorkspaceConfiguration.inspect` tells about one key, reduced to what the mapping needs. */
export interface Setting {
  value: unknown; // the effective value (default included)
  set: boolean; // set by the user somewhere (user, remote, workspace, folder or language scope)
}

/** Looks up a key of the `perflsp` section, e.g. `lintOn` or `profile.timeout`. */
export type Lookup = (key: string) => Setting;

/** The values of `perflsp.lintOn` and what the server calls them (its `run` setting). */
export const LINT_ON: Readonly<Record<string, string>> = { type: "onType", save: "onSave" };

/** Settings only the extension uses: how to start the server. */
export const CLIENT_ONLY = ["path"] as const;

/** Changing one of these means another server process: the extension restarts it. */
export const RESTART_KEYS = ["path", "interpreter"] as const;

export interface ServerSettings {
  run: string;
  workspaceDiagnostics: boolean;
  logLevel: string;
  /** The python the profiler runs the user's code with; left out: the server picks (venv, .venv, its own). */
  interpreter?: string[];
  profile: { enabled: boolean; timeout?: unknown };
  select?: unknown;
  ignore?: unknown;
  severity?: unknown;
  preview?: unknown;
}

export interface Context {
  trusted: boolean; // workspace trust: profiling runs the user's code
  /** `perflsp.interpreter` (variables expanded), else the Python extension's interpreter. */
  interpreter?: readonly string[];
}

/** The `perflsp` section as the server should see it. */
export function serverSettings(lookup: Lookup, context: Context): ServerSettings {
  const lintOn = lookup("lintOn").value;
  const timeout = lookup("profile.timeout");
  const out: ServerSettings = {
    // An unknown value goes through unchanged so that the server's error message names it.
    run: typeof lintOn === "string" && lintOn in LINT_ON ? LINT_ON[lintOn] : (lintOn as string) ?? "onType",
    workspaceDiagnostics: (lookup("workspaceDiagnostics").value as boolean) ?? false,
    logLevel: (lookup("logLevel").value as string) ?? "info",
    // Sent even when the extension checks it too: the server refuses to profile on its own.
    profile: { enabled: profilingAllowed(lookup, context.trusted), ...(timeout.set ? { timeout: timeout.value } : {}) },
  };
  if (context.interpreter && context.interpreter.length > 0) out.interpreter = [...context.interpreter];
  // Overrides of `[tool.perflsp]`: only what the user set, and not an empty list or table, which
  // the settings UI leaves behind when an entry is removed and which means "not set" there.
  for (const key of ["select", "ignore", "severity", "preview"] as const) {
    const setting = lookup(key);
    if (setting.set && !isEmpty(setting.value)) out[key] = setting.value;
  }
  return out;
}

function isEmpty(value: unknown): boolean {
  if (value === undefined || value === null) return true;
  if (Array.isArray(value)) return value.length === 0;
  if (typeof value === "object") return Object.keys(value as object).length === 0;
  return false;
}

/** Whether a configuration change needs a new server process (`affects("perflsp.path")`...). */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_KEYS.some((key) => affects(`${SECTION}.${key}`));
}

/** Whether "Profile this function" may run: the user allows it and the workspace is trusted. */
export function profilingAllowed(lookup: Lookup, trusted: boolean): boolean {
  return trusted && lookup("profile.enabled").value !== false;
}

export interface Variables {
  workspaceFolder?: string;
  userHome: string;
  env: Readonly<Record<string, string | undefined>>;
}

/**
 * `${workspaceFolder}`, `${userHome}`, `${env:NAME}` and a leading `~` in `perflsp.path` and
 * `perflsp.interpreter`, as the Python tool extensions resolve them: VS Code leaves extension
 * settings unexpanded, and `[".venv/bin/python"]`-style settings are meant per workspace.
 * An unknown variable (or `${workspaceFolder}` without a folder) stays as written, so the error
 * about the command shows what the user wrote.
 */
export function expandVariables(values: readonly string[], vars: Variables): string[] {
  return values.map((value) => {
    let out = value.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (whole, name: string, envName?: string) => {
      if (envName) return vars.env[envName] ?? "";
      if (name === "userHome") return vars.userHome;
      return vars.workspaceFolder ?? whole;
    });
    if (out === "~" || out.startsWith("~/")) out = vars.userHome + out.slice(1);
    return out;
  });
}

/**
 * A command whose executable is a relative path (`.venv/bin/python`) made absolute in `folder`:
 * perflsp's processes start outside the workspace (see extension.ts), and such a setting has
 * always meant the folder's file. Bare names (`python3`) are left to PATH.
 */
export function anchorExecutable(command: readonly string[], folder: string | undefined): string[] {
  const [executable, ...rest] = command;
  if (executable === undefined || folder === undefined || !/[\\/]/.test(executable) || path.isAbsolute(executable)) {
    return [...command];
  }
  return [path.join(folder, executable), ...rest];
}

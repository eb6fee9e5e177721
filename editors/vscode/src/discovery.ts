// Finding the perflsp language server, the way ruff-vscode finds ruff.
//
// 1. `perflsp.path`: the command the user configured (taken as is; if it fails, that is an error,
//    not a reason to silently run another perflsp).
// 2. `<python> -m perflsp serve`, with `perflsp.interpreter` or else the interpreter selected in the
//    Python extension: perflsp must run in the user's environment (libcst there, and the user's
//    torch for profiling).
// 3. `perflsp serve` from PATH.
// Every candidate is checked with `--version` before it is used, so an old or broken install is
// reported as such instead of as a server that dies at start. In an untrusted workspace a
// candidate that lies inside it is skipped (and the log says so): its code must not run before
// the user trusts it. No `vscode` import: the process runner and PATH lookup are passed in, and
// the unit tests fake them.

import { insideAny } from "./trust";

export const MIN_SERVER_VERSION = "0.1.0";
// perflsp is not on the package index: pip installs it from a clone or a wheel built from one
// (docs/editors.md). The user puts the path in; the extension never runs a guess.
export const PIP_PACKAGE = "/path/to/perflsp";

export interface RunResult {
  code: number | null; // null: the process could not start or was killed
  stdout: string;
  stderr: string;
  error?: string; // why it could not start (ENOENT, EACCES, timeout)
}

export interface DiscoveryInput {
  pathSetting: readonly string[]; // perflsp.path
  interpreterSetting: readonly string[]; // perflsp.interpreter
  /** The interpreter selected in the Python extension; undefined when it is not installed or has none. */
  pythonExtension: () => Promise<string[] | undefined>;
  /** The absolute path of an executable on PATH, or undefined. */
  which: (name: string) => Promise<string | undefined>;
  /** Runs a command (no shell) and returns its output; never throws. */
  run: (command: readonly string[]) => Promise<RunResult>;
  /** The folders of the workspace when it is untrusted, else empty: nothing inside them may run. */
  untrustedFolders: readonly string[];
}

export type Source = "perflsp.path" | "perflsp.interpreter" | "Python extension" | "PATH";

export interface ServerCommand {
  command: string;
  args: string[]; // without `--stdio`, which vscode-languageclient appends itself
  version: string;
  source: Source;
  /** The command line interface (`perflsp` or `python -m perflsp`), for `rule CODE`; undefined if unknown. */
  cli?: string[];
  /** The interpreter the server runs on, when known (for pip commands). */
  python?: string[];
}

export type Discovery =
  | { ok: true; server: ServerCommand; tried: string[] }
  | { ok: false; message: string; pipCommand: string; python?: string[]; tried: string[]; badSetting?: "perflsp.path" };

const VERSION_LINE = /^perflsp (\d+\.\d+\.\d+[^\s]*)\s*$/m;

/** The version in `perflsp --version` output (`perflsp 0.1.0`), or undefined. */
export function parseVersion(output: string): string | undefined {
  return VERSION_LINE.exec(output)?.[1];
}

/** Compares the numeric release parts of two versions (`0.10.0` > `0.9.1`); pre-release tags sort first. */
export function compareVersions(a: string, b: string): number {
  const parse = (v: string): [number[], boolean] => {
    const match = /^(\d+(?:\.\d+)*)(.*)$/.exec(v.trim());
    if (!match) return [[0], false];
    return [match[1].split(".").map(Number), match[2] !== ""];
  };
  const [pa, preA] = parse(a);
  const [pb, preB] = parse(b);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const diff = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (diff !== 0) return Math.sign(diff);
  }
  // 0.2.0rc1 / 0.2.0.dev1 come before 0.2.0.
  return preA === preB ? 0 : preA ? -1 : 1;
}

/** Quotes an argument for a POSIX shell or PowerShell when it needs it (paths with spaces). */
export function shellQuote(arg: string): string {
  return /^[\w@%+=:,./\\-]+$/.test(arg) ? arg : `"${arg.replace(/(["\\$`])/g, "\\$1")}"`;
}

/** The exact command that installs perflsp into `python` (or upgrades it). */
export function pipCommand(python: readonly string[] | undefined, upgrade = false): string {
  const interpreter = python && python.length > 0 ? python : ["python3"];
  return [...interpreter, "-m", "pip", "install", ...(upgrade ? ["-U"] : []), PIP_PACKAGE].map(shellQuote).join(" ");
}

/** The server command `perflsp.path` stands for: a lone executable gets `serve` appended. */
export function commandFromPath(path: readonly string[]): { argv: string[]; cli?: string[]; python?: string[] } {
  const argv = [...path];
  if (argv.length === 1) argv.push("serve");
  const serve = argv.indexOf("serve");
  // `perflsp`, `python -m perflsp`, `uv run perflsp`: whatever comes before `serve` is the CLI.
  const cli = serve > 0 ? argv.slice(0, serve) : undefined;
  // `<python> -m perflsp serve`: the interpreter, for the pip command of an upgrade.
  const python = cli && cli.length >= 3 && cli.at(-2) === "-m" && cli.at(-1) === "perflsp" ? cli.slice(0, -2) : undefined;
  return python ? { argv, cli, python } : { argv, cli };
}

function describe(argv: readonly string[]): string {
  return argv.map(shellQuote).join(" ");
}

function failure(result: RunResult): string {
  if (result.error) return result.error;
  const text = (result.stderr || result.stdout).trim().split("\n").slice(-3).join(" | ");
  return `exit status ${result.code}${text ? `: ${text}` : ""}`;
}

async function version(input: DiscoveryInput, cli: readonly string[]): Promise<{ version?: string; why?: string }> {
  const result = await input.run([...cli, "--version"]);
  const found = result.code === 0 ? parseVersion(result.stdout + result.stderr) : undefined;
  return found ? { version: found } : { why: failure(result) };
}

function tooOld(found: string): boolean {
  return compareVersions(found, MIN_SERVER_VERSION) < 0;
}

/** Why `executable` may not run (a file of the untrusted workspace), or undefined; a bare name is looked up on PATH. */
async function untrusted(input: DiscoveryInput, executable: string): Promise<string | undefined> {
  if (input.untrustedFolders.length === 0) return undefined;
  const file = /[\\/]/.test(executable) ? executable : await input.which(executable);
  if (!file || !(await insideAny(file, input.untrustedFolders))) return undefined;
  return `${file} is inside the untrusted workspace: not run (trust the workspace to use it)`;
}

/** The python to run `-m perflsp` with, and where it came from; none that the untrusted workspace holds. */
async function interpreter(input: DiscoveryInput, tried: string[]): Promise<{ python: string[]; source: Source } | undefined> {
  if (input.interpreterSetting.length > 0) {
    const refused = await untrusted(input, input.interpreterSetting[0]);
    if (!refused) return { python: [...input.interpreterSetting], source: "perflsp.interpreter" };
    tried.push(`perflsp.interpreter: ${refused}`);
  }
  const selected = await input.pythonExtension();
  if (!selected || selected.length === 0) {
    tried.push("Python extension: not installed, or no interpreter selected");
    return undefined;
  }
  const refused = await untrusted(input, selected[0]);
  if (!refused) return { python: selected, source: "Python extension" };
  tried.push(`Python extension: ${refused}`);
  return undefined;
}

export async function discover(input: DiscoveryInput): Promise<Discovery> {
  const tried: string[] = [];

  // 1. perflsp.path
  const pathRefused = input.pathSetting.length > 0 ? await untrusted(input, input.pathSetting[0]) : undefined;
  if (pathRefused) {
    tried.push(`perflsp.path: ${pathRefused}`);
  } else if (input.pathSetting.length > 0) {
    const { argv, cli, python } = commandFromPath(input.pathSetting);
    // `--version` is a top-level option: check it on the CLI part when there is one.
    const check = await version(input, cli ?? argv.slice(0, 1));
    if (!check.version) {
      return {
        ok: false, tried: [`perflsp.path: ${describe(argv)}: ${check.why}`], badSetting: "perflsp.path",
        pipCommand: pipCommand(python), python,
        message: `The server command in perflsp.path (${describe(argv)}) does not work: ${check.why}. ` +
          "Fix the setting, or clear it to let perflsp find the server in your Python environment.",
      };
    }
    if (tooOld(check.version)) {
      return {
        ok: false, tried: [`perflsp.path: ${describe(argv)}: perflsp ${check.version}`],
        pipCommand: pipCommand(python, true), python,
        message: `perflsp.path runs perflsp ${check.version}; this extension needs ${MIN_SERVER_VERSION} or newer. ` +
          `Upgrade it: ${pipCommand(python, true)}`,
      };
    }
    return {
      ok: true, tried,
      server: { command: argv[0], args: argv.slice(1), version: check.version, source: "perflsp.path", cli, python },
    };
  }

  // 2. <python> -m perflsp serve
  const chosen = await interpreter(input, tried);
  const python = chosen?.python;
  let outdated: string | undefined;
  if (chosen) {
    const cli = [...chosen.python, "-m", "perflsp"];
    const check = await version(input, cli);
    if (check.version && !tooOld(check.version)) {
      return {
        ok: true, tried,
        server: { command: chosen.python[0], args: [...chosen.python.slice(1), "-m", "perflsp", "serve"],
          version: check.version, source: chosen.source, cli, python: chosen.python },
      };
    }
    if (check.version) outdated = check.version;
    tried.push(`${chosen.source}: ${describe(cli)}: ${check.version ? `perflsp ${check.version} is too old` : check.why}`);
  }

  // 3. perflsp on PATH
  const onPath = await input.which("perflsp");
  const onPathRefused = onPath ? await untrusted(input, onPath) : undefined;
  if (!onPath) {
    tried.push("PATH: no `perflsp` executable");
  } else if (onPathRefused) {
    tried.push(`PATH: ${onPathRefused}`);
  } else {
    const check = await version(input, [onPath]);
    if (check.version && !tooOld(check.version)) {
      return {
        ok: true, tried,
        server: { command: onPath, args: ["serve"], version: check.version, source: "PATH", cli: [onPath], python },
      };
    }
    tried.push(`PATH: ${onPath}: ${check.version ? `perflsp ${check.version} is too old` : check.why}`);
  }

  const pip = pipCommand(python, outdated !== undefined);
  const where = python ? `the Python environment ${describe(python)}` : "your Python environment";
  const message = outdated
    ? `perflsp ${outdated} in ${where} is older than ${MIN_SERVER_VERSION}, which this extension needs. Upgrade it: ${pip}`
    : `perflsp's language server is not installed in ${where}. Install it with: ${pip}` +
      (python ? "" : " (or select an interpreter in the Python extension, or set perflsp.interpreter)");
  return { ok: false, message, pipCommand: pip, python, tried };
}

// Activating the extension in a cloned folder must not run the folder's code: the real
// extension.ts with a stand-in for the `vscode` API, and real processes (discovery's
// `--version`, the server command) on real files.
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";

import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";

import { activate, deactivate } from "../src/extension";

interface Started {
  command: string;
  args: string[];
  cwd?: string;
  status: number | null;
}

// What the stand-ins see and record, set by each test.
const host = vi.hoisted(() => ({
  folders: [] as string[],
  trusted: true,
  user: {} as Record<string, unknown>, // the user's perflsp.* settings
  pythonExtension: undefined as string | undefined, // the Python extension's selected interpreter
  log: [] as string[],
  started: [] as Started[],
}));

vi.mock("vscode", () => {
  const disposable = { dispose: () => undefined };
  const channel = (level: string) => (message: string) => void host.log.push(`${level}: ${message}`);
  const pythonApi = () => ({
    environments: {
      getActiveEnvironmentPath: () => ({ id: host.pythonExtension, path: host.pythonExtension }),
      resolveEnvironment: async () => ({ executable: { uri: { fsPath: host.pythonExtension } } }),
      onDidChangeActiveEnvironmentPath: () => disposable,
    },
  });
  return {
    Disposable: class { dispose(): void {} },
    MarkdownString: class { constructor(readonly value: string) {} },
    ThemeColor: class { constructor(readonly id: string) {} },
    StatusBarAlignment: { Left: 1, Right: 2 },
    window: {
      createOutputChannel: () => ({
        info: channel("info"), warn: channel("warn"), error: channel("error"), show: () => undefined,
        dispose: () => undefined,
      }),
      createStatusBarItem: () => ({ show: () => undefined, dispose: () => undefined }),
      showErrorMessage: async () => undefined,
      showWarningMessage: async () => undefined,
      showInformationMessage: async () => undefined,
    },
    workspace: {
      get workspaceFolders() {
        return host.folders.map((folder, index) => ({ uri: { fsPath: folder }, name: path.basename(folder), index }));
      },
      get isTrusted() {
        return host.trusted;
      },
      // Only the user's settings: VS Code ignores an untrusted workspace's perflsp.path and perflsp.interpreter.
      getConfiguration: () => ({
        get: (key: string) => host.user[key],
        inspect: (key: string) => ({ globalValue: host.user[key] }),
      }),
      registerTextDocumentContentProvider: () => disposable,
      onDidChangeConfiguration: () => disposable,
      onDidGrantWorkspaceTrust: () => disposable,
    },
    commands: { registerCommand: () => disposable, executeCommand: async () => undefined },
    extensions: {
      getExtension: () => (host.pythonExtension === undefined ? undefined : { isActive: true, exports: pythonApi() }),
    },
  };
});

vi.mock("vscode-languageclient/node", () => {
  interface Executable {
    command: string;
    args: string[];
    options?: { cwd?: string };
  }
  class LanguageClient {
    readonly state = 2;
    constructor(_id: string, _name: string, private readonly server: Executable) {}
    onDidChangeState() {
      return { dispose: () => undefined };
    }
    // Starts the server where vscode-languageclient does: `options.cwd`, else the first workspace
    // folder. Its stdin is closed at once, so a real server ends right away.
    async start(): Promise<void> {
      const cwd = this.server.options?.cwd ?? host.folders[0];
      const args = [...this.server.args, "--stdio"];
      const run = spawnSync(this.server.command, args, { cwd, input: "", timeout: 20_000 });
      host.started.push({ command: this.server.command, args, cwd, status: run.status });
    }
    async dispose(): Promise<void> {}
  }
  return {
    LanguageClient, State: { Stopped: 1, Running: 2, Starting: 3 }, TransportKind: { stdio: 0 },
    RevealOutputChannelOn: { Never: 4 }, ExecuteCommandRequest: { type: "workspace/executeCommand" },
  };
});

const PYTHON = process.env.PYTHON ?? "python3";
const hasPython = spawnSync(PYTHON, ["-c", ""]).status === 0;

function write(file: string, text: string, executable = false): void {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  if (executable) chmodSync(file, 0o755);
}

describe.skipIf(process.platform === "win32")("activating in a cloned folder", () => {
  let root: string;
  let cloned: string; // the workspace: its files write PWNED into it when they run
  let saved: Record<string, string | undefined>; // the environment variables a test changes

  const pwned = () => existsSync(path.join(cloned, "PWNED"));

  async function activated(): Promise<void> {
    const extensionPath = path.join(root, "extension"); // where VS Code installed the extension
    mkdirSync(extensionPath, { recursive: true });
    await activate({ subscriptions: [], extensionPath } as never);
  }

  beforeEach(() => {
    saved = { PATH: process.env.PATH, PYTHONPATH: process.env.PYTHONPATH };
    root = mkdtempSync(path.join(tmpdir(), "perflsp-activation-"));
    cloned = path.join(root, "cloned");
    const pwn = `open(${JSON.stringify(path.join(cloned, "PWNED"))}, "w").close()\n`;
    write(path.join(cloned, "perflsp", "__init__.py"), pwn);
    write(path.join(cloned, "perflsp", "__main__.py"), pwn);
    write(path.join(cloned, ".venv", "bin", "python"), `#!/bin/sh\ntouch "${path.join(cloned, "PWNED")}"\necho "perflsp 0.1.0"\n`, true);
    Object.assign(host, { folders: [cloned], trusted: false, user: {}, pythonExtension: undefined, log: [], started: [] });
  });

  afterEach(async () => {
    await deactivate();
    for (const [name, value] of Object.entries(saved)) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
    rmSync(root, { recursive: true, force: true });
  });

  it.skipIf(!hasPython).each([false, true])(
    "never runs a perflsp package of the folder (trusted: %s)", async (trusted) => {
      // The user's perflsp: a stand-in that answers --version and serves nothing.
      write(path.join(root, "site", "perflsp", "__init__.py"), "");
      write(path.join(root, "site", "perflsp", "__main__.py"),
        "import sys\nif sys.argv[1:] == ['--version']:\n    print('perflsp 0.1.0')\n");
      process.env.PYTHONPATH = path.join(root, "site");
      Object.assign(host, { trusted, user: { interpreter: [PYTHON] } });

      await activated();

      expect(pwned()).toBe(false);
      expect(host.log).toContain(`info: Starting perflsp 0.1.0 (found via perflsp.interpreter): ${PYTHON} -m perflsp serve`);
      expect(host.started).toHaveLength(1);
      expect(host.started[0].status).toBe(0);
    });

  it("never runs an interpreter inside an untrusted folder, falls back to PATH and says so", async () => {
    const userBin = path.join(root, "user", "bin");
    write(path.join(userBin, "perflsp"), '#!/bin/sh\necho "perflsp 0.1.0"\n', true);
    process.env.PATH = `${userBin}${path.delimiter}${process.env.PATH ?? ""}`;
    const venvPython = path.join(cloned, ".venv", "bin", "python");
    // A user-level interpreter setting meant for trusted projects, and the Python extension's pick.
    Object.assign(host, { user: { interpreter: ["${workspaceFolder}/.venv/bin/python"] }, pythonExtension: venvPython });

    await activated();

    expect(pwned()).toBe(false);
    const refused = `is inside the untrusted workspace: not run (trust the workspace to use it)`;
    expect(host.log).toContain(`info:   tried perflsp.interpreter: ${venvPython} ${refused}`);
    expect(host.log).toContain(`info:   tried Python extension: ${venvPython} ${refused}`);
    expect(host.started.map((s) => s.command)).toEqual([path.join(userBin, "perflsp")]);
  });
});

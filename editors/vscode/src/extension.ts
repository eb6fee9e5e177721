// perflsp for VS Code: starts the perflsp language server (diagnostics, hover, quick fixes) for
// Python files and notebooks, and adds the commands around it (restart, logs, profile a function,
// fix all, rule documentation) and a status bar item with the server's state.
import { execFile } from "node:child_process";
import { constants as fsConstants, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as vscode from "vscode";
import {
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
} from "vscode-languageclient/node";

import { discover, Discovery, RunResult, ServerCommand, pipCommand } from "./discovery";
import {
  BREAKS_COMMAND, COMPILE_COMMAND, describeProfileResult, enclosingFunction, PROFILE_COMMAND, PROFILE_COMMANDS,
  RECORD_COMMAND,
  progressTitle,
} from "./profile";
import * as python from "./python";
import {
  anchorExecutable, expandVariables, Lookup, needsRestart, profilingAllowed, SECTION, ServerSettings, serverSettings,
} from "./settings";

const FIX_ALL_KIND = "source.fixAll.perflsp";
const RULE_SCHEME = "perflsp-rule";
const VERSION_TIMEOUT_MS = 20_000; // `python -m perflsp --version` on a cold disk
const STOP_TIMEOUT_MS = 3_000;

let server: Server | undefined;

// --- helpers around `vscode` ---------------------------------------------------------------------

/** A `Lookup` over `WorkspaceConfiguration`: the effective value, and whether the user set it. */
function lookupIn(config: vscode.WorkspaceConfiguration): Lookup {
  return (key) => {
    const i = config.inspect(key);
    const set = i !== undefined && [
      i.globalValue, i.workspaceValue, i.workspaceFolderValue,
      i.globalLanguageValue, i.workspaceLanguageValue, i.workspaceFolderLanguageValue,
    ].some((v) => v !== undefined);
    return { value: config.get(key), set };
  };
}

function mainFolder(): vscode.Uri | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri;
}

/** The workspace's folders while it is untrusted (nothing inside them may run), else none. */
function untrustedFolders(): string[] {
  return vscode.workspace.isTrusted ? [] : (vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath);
}

function config(resource?: vscode.Uri): vscode.WorkspaceConfiguration {
  return vscode.workspace.getConfiguration(SECTION, resource ?? mainFolder());
}

function variables(folder?: vscode.Uri) {
  return { workspaceFolder: folder?.fsPath, userHome: os.homedir(), env: process.env };
}

function canProfile(resource?: vscode.Uri): boolean {
  return profilingAllowed(lookupIn(config(resource)), vscode.workspace.isTrusted);
}

function run(command: readonly string[], cwd: string, timeout = VERSION_TIMEOUT_MS): Promise<RunResult> {
  return new Promise((resolve) => {
    execFile(command[0], command.slice(1), { timeout, windowsHide: true, cwd },
      (error, stdout, stderr) => {
        if (error && typeof error.code === "string") {
          resolve({ code: null, stdout: "", stderr: "", error: `${error.code} (${command[0]})` }); // ENOENT, EACCES
        } else if (error && error.killed) {
          resolve({ code: null, stdout, stderr, error: `no answer within ${timeout / 1000} s` });
        } else {
          resolve({ code: error ? (error.code as number | undefined) ?? 1 : 0, stdout, stderr });
        }
      });
  });
}

async function which(name: string): Promise<string | undefined> {
  const exts = process.platform === "win32" ? (process.env.PATHEXT ?? ".EXE;.CMD;.BAT").split(";") : [""];
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    if (!dir) continue;
    for (const ext of exts) {
      const candidate = path.join(dir, name + ext);
      try {
        await fs.access(candidate, fsConstants.X_OK);
        if ((await fs.stat(candidate)).isFile()) return candidate;
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

function codeOf(diagnostic: vscode.Diagnostic): string | undefined {
  const code = diagnostic.code;
  if (code === undefined) return undefined;
  return String(typeof code === "object" ? code.value : code);
}

// --- status bar ---------------------------------------------------------------------------------

class Status implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem("perflsp.status", vscode.StatusBarAlignment.Right, 100);

  constructor() {
    this.item.name = "perflsp";
    this.item.command = "perflsp.showLogs";
    this.item.show();
  }

  private set(icon: string, tooltip: string, error = false): void {
    this.item.text = `$(${icon}) perflsp`;
    const md = new vscode.MarkdownString(
      `${tooltip}\n\n[Restart server](command:perflsp.restart) · [Show logs](command:perflsp.showLogs)`);
    md.isTrusted = { enabledCommands: ["perflsp.restart", "perflsp.showLogs"] };
    this.item.tooltip = md;
    this.item.backgroundColor = error ? new vscode.ThemeColor("statusBarItem.errorBackground") : undefined;
    this.item.accessibilityInformation = { label: `perflsp: ${tooltip}` };
  }

  starting(): void {
    this.set("loading~spin", "perflsp: starting the language server");
  }

  running(found: ServerCommand): void {
    const cmd = [found.command, ...found.args].join(" ");
    this.set("check", `perflsp ${found.version} is running (found via ${found.source}): \`${cmd}\``);
  }

  stopped(): void {
    this.set("circle-slash", "perflsp: the language server stopped", true);
  }

  failed(message: string): void {
    this.set("error", `perflsp: ${message}`, true);
  }

  dispose(): void {
    this.item.dispose();
  }
}

// --- the language server --------------------------------------------------------------------------

class Server implements vscode.Disposable {
  client: LanguageClient | undefined;
  found: ServerCommand | undefined;
  private pythonExtension: string[] | undefined; // the Python extension's interpreter at the last start
  private queue: Promise<void> = Promise.resolve();
  private stateListener: vscode.Disposable | undefined;

  /**
   * @param home where perflsp's processes start: never a workspace folder, since `python -m perflsp`
   *   puts the current folder first on sys.path and a `perflsp/` folder there would run instead of
   *   perflsp, trusted or not (Python 3.9 and 3.10 have no -P). The server learns the workspace
   *   through LSP.
   */
  constructor(private readonly log: vscode.LogOutputChannel, private readonly status: Status,
              private readonly home: string) {}

  /** Starts (or restarts) the server; calls are serialised so two restarts never overlap. */
  restart(reason: string): Promise<void> {
    this.queue = this.queue.then(async () => {
      await this.stopNow();
      await this.startNow(reason);
    });
    return this.queue;
  }

  stop(): Promise<void> {
    this.queue = this.queue.then(() => this.stopNow());
    return this.queue;
  }

  running(): LanguageClient | undefined {
    return this.client?.state === State.Running ? this.client : undefined;
  }

  /** Whether the running server offers `command` through workspace/executeCommand. */
  offers(command: string): boolean {
    const commands = this.client?.initializeResult?.capabilities.executeCommandProvider?.commands ?? [];
    return commands.includes(command);
  }

  private async startNow(reason: string): Promise<void> {
    this.status.starting();
    const resource = mainFolder();
    const settings = config(resource);
    this.log.info(`Looking for the perflsp server (${reason})`);
    // Asked once per start: discovery may need it, and the profiler runs the user's code with it.
    this.pythonExtension = undefined;
    const pythonExtension = async () => (this.pythonExtension ??= await python.selectedInterpreter(resource));
    const setting = (key: string) =>
      anchorExecutable(expandVariables(settings.get<string[]>(key) ?? [], variables(resource)), resource?.fsPath);
    const found = await discover({
      pathSetting: setting("path"),
      interpreterSetting: setting("interpreter"),
      pythonExtension,
      which,
      run: (command) => run(command, this.home),
      untrustedFolders: untrustedFolders(),
    });
    for (const line of found.tried) this.log.info(`  tried ${line}`);
    if (!found.ok) {
      this.found = undefined;
      this.status.failed(found.message);
      this.log.error(found.message);
      void this.reportMissing(found);
      return;
    }
    this.found = found.server;
    await pythonExtension();
    const { command, args, version, source } = found.server;
    this.log.info(`Starting perflsp ${version} (found via ${source}): ${[command, ...args].join(" ")}`);
    const serverOptions: ServerOptions = {
      command, args, transport: TransportKind.stdio, // the client appends `--stdio`
      options: { cwd: this.home }, // without it, vscode-languageclient would start it in the workspace
    };
    const client = new LanguageClient("perflsp", "perflsp", serverOptions, this.clientOptions());
    this.client = client;
    this.stateListener = client.onDidChangeState((event) => {
      if (event.newState === State.Running) this.status.running(found.server);
      else if (event.newState === State.Starting) this.status.starting();
      else if (this.client === client) this.status.stopped();
    });
    try {
      await client.start();
      this.status.running(found.server);
    } catch (error) {
      const message = `perflsp ${version} (${[command, ...args].join(" ")}) failed to start: ${String(error)}`;
      this.status.failed(message);
      this.log.error(message);
      void vscode.window.showErrorMessage(message, "Show logs").then((pick) => pick && this.log.show());
    }
  }

  private async stopNow(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.stateListener?.dispose();
    this.stateListener = undefined;
    if (client) {
      try {
        await client.dispose(STOP_TIMEOUT_MS);
      } catch (error) {
        this.log.warn(`Stopping the server: ${String(error)}`); // it was not running: nothing to stop
      }
      this.status.stopped();
    }
  }

  /** The `perflsp` section for the server, for a workspace folder (or the window). */
  private settingsFor(scope?: vscode.Uri): ServerSettings {
    const settings = config(scope);
    const folder = scope ? vscode.workspace.getWorkspaceFolder(scope)?.uri : mainFolder();
    const explicit = expandVariables(settings.get<string[]>("interpreter") ?? [], variables(folder));
    return serverSettings(lookupIn(settings), {
      trusted: vscode.workspace.isTrusted,
      interpreter: explicit.length > 0 ? explicit : this.pythonExtension,
    });
  }

  private clientOptions(): LanguageClientOptions {
    return {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" },
        // Notebook cells; the server advertises notebook sync and analyses the cells together.
        { scheme: "vscode-notebook-cell", language: "python" },
      ],
      outputChannel: this.log,
      traceOutputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      // The settings of the first folder, so the first diagnostics already honour them.
      initializationOptions: () => ({ settings: this.settingsFor(mainFolder()) }),
      markdown: { isTrusted: false, supportHtml: false },
      middleware: {
        workspace: {
          // The server asks for the `perflsp` section: answer with the keys it reads (see settings.ts).
          configuration: async (params, token, next) => {
            const answers = await next(params, token);
            if (!Array.isArray(answers)) return answers;
            return params.items.map((item, i) => item.section === SECTION
              ? this.settingsFor(item.scopeUri ? vscode.Uri.parse(item.scopeUri) : undefined)
              : answers[i]);
          },
        },
        // With profiling off (setting, or an untrusted workspace), hide the server's profile
        // actions and code lenses: they would only be refused.
        provideCodeActions: async (document, range, context, token, next) => {
          const actions = await next(document, range, context, token);
          if (!actions || canProfile(document.uri)) return actions;
          return actions.filter((a) => !PROFILE_COMMANDS.includes((a instanceof vscode.CodeAction ? a.command : a)?.command ?? ""));
        },
        provideCodeLenses: async (document, token, next) => {
          const lenses = await next(document, token);
          if (!lenses || canProfile(document.uri)) return lenses;
          return lenses.filter((lens) => !PROFILE_COMMANDS.includes(lens.command?.command ?? ""));
        },
        // The server's profile commands (its code lens, its code action) run like "Profile this
        // function": checked, cancellable, with the verdict shown.
        executeCommand: async (command, args, next) =>
          PROFILE_COMMANDS.includes(command) ? profile(this.log, command, args) : next(command, args),
      },
    };
  }

  private async reportMissing(found: Extract<Discovery, { ok: false }>): Promise<void> {
    const install = "Install in terminal";
    const openSetting = "Open setting";
    // A broken perflsp.path is fixed in the settings; a missing server with pip.
    const actions = found.badSetting ? [openSetting, "Show logs"] : [install, "Restart server", "Show logs"];
    const pick = await vscode.window.showErrorMessage(`perflsp: ${found.message}`, ...actions);
    if (pick === openSetting) {
      void vscode.commands.executeCommand("workbench.action.openSettings", found.badSetting);
    } else if (pick === install) {
      const terminal = vscode.window.createTerminal("perflsp: install");
      terminal.show();
      terminal.sendText(found.pipCommand, false);  // not run: the path to the clone or wheel is the user's to fill in
      void vscode.window.showInformationMessage(
        "perflsp: put the path of your perflsp clone or wheel in the command, run it, then restart the server.",
        "Restart server")
        .then((again) => again && this.restart("installed with pip"));
    } else if (pick === "Restart server") {
      void this.restart("asked by the user");
    } else if (pick === "Show logs") {
      this.log.show();
    }
  }

  /** `perflsp rule CODE` from the server's own CLI (same version as the diagnostics), or undefined. */
  async rulePage(code: string): Promise<string | undefined> {
    const cli = this.found?.cli;
    if (!cli) return undefined;
    const result = await run([...cli, "rule", code], this.home);
    return result.code === 0 && result.stdout.trim() ? result.stdout : undefined;
  }

  dispose(): void {
    void this.stop();
  }
}

// --- commands ---------------------------------------------------------------------------------------

/**
 * "Profile this function" (or "Try torch.compile on this function", "Find torch.compile graph
 * breaks": `command`) from the palette or the context menu: the function around the cursor.
 */
async function profileAtCursor(log: vscode.LogOutputChannel, command: string, uriArg?: unknown,
                               nameArg?: unknown): Promise<unknown> {
  if (typeof uriArg === "string" && typeof nameArg === "string") {
    return profile(log, command, [uriArg, nameArg]); // called with a target (another extension, a keybinding)
  }
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.languageId !== "python") {
    void vscode.window.showWarningMessage("perflsp: open a Python file and put the cursor inside the function to profile.");
    return;
  }
  const name = enclosingFunction(editor.document.getText().split(/\r?\n/), editor.selection.active.line);
  if (!name) {
    void vscode.window.showWarningMessage("perflsp: put the cursor inside a function (a `def`) to profile it.");
    return;
  }
  return profile(log, command, [editor.document.uri.toString(), name]);
}

/**
 * Runs one of the server's profiling commands (`perflsp.profileFunction`, `perflsp.profileAgain`,
 * `perflsp.compileFunction`, `perflsp.findGraphBreaks`)
 * with `[uri, qualname]`: from the command above, and from the server's code lens and code
 * action, which reach it through the `executeCommand` middleware. Checks that profiling is allowed
 * (it runs the user's code), saves the file (the runtime runs it from disk), shows a cancellable
 * notification while it runs, and the verdict afterwards.
 */
async function profile(log: vscode.LogOutputChannel, command: string, args: unknown[]): Promise<unknown> {
  const uri = typeof args[0] === "string" ? args[0] : undefined;
  const name = command === RECORD_COMMAND ? "the run" : typeof args[1] === "string" ? args[1] : "the function";
  if (!vscode.workspace.isTrusted) {
    const pick = await vscode.window.showWarningMessage(
      "perflsp: profiling runs your code, so it is off in untrusted workspaces. Trust this workspace to profile.",
      "Manage Workspace Trust");
    if (pick) void vscode.commands.executeCommand("workbench.trust.manage");
    return undefined;
  }
  if (!canProfile(uri ? vscode.Uri.parse(uri) : undefined)) {
    const pick = await vscode.window.showWarningMessage(
      "perflsp: profiling is switched off (perflsp.profile.enabled).", "Open setting");
    if (pick) void vscode.commands.executeCommand("workbench.action.openSettings", "perflsp.profile.enabled");
    return undefined;
  }
  const client = server?.running();
  if (!client || !server) {
    const pick = await vscode.window.showErrorMessage("perflsp: the language server is not running.", "Show logs");
    if (pick) log.show();
    return undefined;
  }
  if (!server.offers(command)) {
    const found = server.found;
    const upgrade = pipCommand(found?.python, true);
    void vscode.window.showWarningMessage(
      `perflsp: profiling needs a newer perflsp server. perflsp ${found?.version ?? "?"} (found via ` +
      `${found?.source ?? "?"}) does not offer "${command}". Upgrade it: ${upgrade}`);
    log.warn(`The server does not offer ${command}; upgrade it with: ${upgrade}`);
    return undefined;
  }
  const document = vscode.workspace.textDocuments.find((d) => d.uri.toString() === uri);
  if (document?.isDirty) await document.save();
  log.info(`Profiling ${name} in ${uri}`);
  try {
    // The server reports the phases in the status bar; this notification carries the Cancel button
    // ($/cancelRequest: the server stops the profiling process).
    const result = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, cancellable: true, title: progressTitle(command, name) },
      (_progress, token) => client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }, token),
    );
    const { text, failed, shownByServer } = describeProfileResult(result);
    log.info(`Profiled ${name}: ${text}`);
    if (shownByServer) {
      // The server already said why (a window message): do not say it twice.
    } else if (failed) {
      void vscode.window.showErrorMessage(`perflsp: ${name}: ${text}`, "Show logs").then((p) => p && log.show());
    } else {
      void vscode.window.showInformationMessage(`perflsp: ${name}: ${text}`);
    }
    return result;
  } catch (error) {
    if ((error as { code?: number }).code === -32800) {
      log.info(`Profiling ${name} cancelled`); // RequestCancelled: the user pressed Cancel
      return undefined;
    }
    const message = error instanceof Error ? error.message : String(error);
    log.error(`Profiling ${name} failed: ${message}`);
    void vscode.window.showErrorMessage(`perflsp: profiling ${name} failed: ${message}`, "Show logs").then((p) => p && log.show());
    return undefined;
  }
}

async function fixAll(log: vscode.LogOutputChannel): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || editor.document.languageId !== "python") {
    void vscode.window.showWarningMessage("perflsp: open a Python file or notebook cell to fix.");
    return;
  }
  const document = editor.document;
  const all = document.validateRange(new vscode.Range(0, 0, document.lineCount, 0));
  // The same action VS Code runs for `editor.codeActionsOnSave: {"source.fixAll.perflsp": ...}`;
  // the last argument resolves the edit of a lazily resolved action.
  const actions = await vscode.commands.executeCommand<vscode.CodeAction[]>(
    "vscode.executeCodeActionProvider", document.uri, all, FIX_ALL_KIND, 1);
  const action = (actions ?? []).find((a) => a.kind?.value === FIX_ALL_KIND);
  if (!action || (!action.edit && !action.command)) {
    void vscode.window.showInformationMessage("perflsp: nothing to fix automatically here (only safe fixes are applied).");
    return;
  }
  if (action.edit && !(await vscode.workspace.applyEdit(action.edit))) {
    void vscode.window.showErrorMessage("perflsp: the fixes could not be applied (the file changed meanwhile?).");
    return;
  }
  if (action.command) await vscode.commands.executeCommand(action.command.command, ...(action.command.arguments ?? []));
  log.info(`Applied the safe fixes to ${document.uri.toString()}`);
}

class RulePages implements vscode.TextDocumentContentProvider {
  readonly pages = new Map<string, string>();
  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.pages.get(uri.path) ?? "";
  }
}

async function openRuleDocs(pages: RulePages, codeArg?: unknown): Promise<void> {
  let code = typeof codeArg === "string" ? codeArg : undefined;
  const editor = vscode.window.activeTextEditor;
  const ours = editor ? vscode.languages.getDiagnostics(editor.document.uri).filter((d) => d.source === "perflsp") : [];
  if (!code && editor) {
    const here = ours.find((d) => d.range.contains(editor.selection.active));
    code = here ? codeOf(here) : undefined;
  }
  if (!code) {
    const seen = new Map<string, string>();
    for (const d of ours) {
      const c = codeOf(d);
      if (c && !seen.has(c)) seen.set(c, d.message);
    }
    if (seen.size > 0) {
      const pick = await vscode.window.showQuickPick(
        [...seen].sort().map(([label, detail]) => ({ label, detail })), { placeHolder: "Rule to read about" });
      code = pick?.label;
    } else {
      code = await vscode.window.showInputBox({
        prompt: "Rule code", placeHolder: "PFL101",
        validateInput: (v) => (/^PFL\d{3}$/i.test(v.trim()) ? undefined : "A rule code such as PFL101"),
      });
    }
    code = code?.trim().toUpperCase();
  }
  if (!code) return;
  const page = await server?.rulePage(code);
  if (!page) {
    // No local CLI (a custom perflsp.path): the page where `ruleDocsUrl` says it is published, if
    // it says so; perflsp has no website of its own.
    const link = ours.find((d) => codeOf(d) === code && typeof d.code === "object")?.code as { target?: vscode.Uri } | undefined;
    if (link?.target) {
      await vscode.env.openExternal(link.target);
    } else {
      void vscode.window.showWarningMessage(`perflsp: no perflsp command beside the server to print ${code}'s page; run \`perflsp rule ${code}\` where perflsp is installed.`);
    }
    return;
  }
  const uri = vscode.Uri.from({ scheme: RULE_SCHEME, path: `/${code}.md` });
  pages.pages.set(uri.path, page);
  try {
    await vscode.commands.executeCommand("markdown.showPreview", uri);
  } catch {
    await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(uri), { preview: true });
  }
}

// --- activation -----------------------------------------------------------------------------------------

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel("perflsp", { log: true });
  const status = new Status();
  server = new Server(log, status, context.extensionPath);
  const pages = new RulePages();
  const updateProfileContext = () =>
    void vscode.commands.executeCommand("setContext", "perflsp.profileEnabled", canProfile());
  context.subscriptions.push(
    log, status, server,
    vscode.workspace.registerTextDocumentContentProvider(RULE_SCHEME, pages),
    vscode.commands.registerCommand("perflsp.restart", () => server?.restart("asked by the user")),
    vscode.commands.registerCommand("perflsp.showLogs", () => log.show()),
    vscode.commands.registerCommand("perflsp.profile",
      (uri?: unknown, name?: unknown) => profileAtCursor(log, PROFILE_COMMAND, uri, name)),
    vscode.commands.registerCommand("perflsp.tryCompile",
      (uri?: unknown, name?: unknown) => profileAtCursor(log, COMPILE_COMMAND, uri, name)),
    // Not "perflsp.findGraphBreaks": the language client registers the server's commands under their names.
    vscode.commands.registerCommand("perflsp.graphBreaks",
      (uri?: unknown, name?: unknown) => profileAtCursor(log, BREAKS_COMMAND, uri, name)),
    // Not "perflsp.recordRun", the server's own command (registered by the language client).
    vscode.commands.registerCommand("perflsp.record", () => {
      const target = vscode.window.activeTextEditor?.document.uri ?? vscode.workspace.workspaceFolders?.[0]?.uri;
      if (!target) {
        void vscode.window.showWarningMessage("perflsp: open a folder to record a run of its program.");
        return undefined;
      }
      return profile(log, RECORD_COMMAND, [target.toString()]);
    }),
    vscode.commands.registerCommand("perflsp.fixAll", () => fixAll(log)),
    vscode.commands.registerCommand("perflsp.openRuleDocs", (code?: unknown) => openRuleDocs(pages, code)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      // Other perflsp settings reach the running server through workspace/configuration.
      if (needsRestart((s) => event.affectsConfiguration(s))) void server?.restart("perflsp.path or perflsp.interpreter changed");
      if (event.affectsConfiguration(`${SECTION}.profile.enabled`)) updateProfileContext();
    }),
    // Restricted settings (perflsp.path, perflsp.interpreter) of the workspace apply from now on.
    vscode.workspace.onDidGrantWorkspaceTrust(() => {
      updateProfileContext();
      void server?.restart("the workspace is trusted now");
    }),
    await python.onInterpreterChanged(() => {
      const settings = config();
      // Only when the Python extension's interpreter is what the server runs on.
      if ((settings.get<string[]>("path") ?? []).length === 0 && (settings.get<string[]>("interpreter") ?? []).length === 0) {
        void server?.restart("the Python interpreter changed");
      }
    }),
  );
  updateProfileContext();
  await server.restart("extension activated");
}

export function deactivate(): Promise<void> | undefined {
  return server?.stop();
}

// The interpreter selected in the Python extension (ms-python.python), through its public
// environments API — the part of `@vscode/python-extension` perflsp needs, typed here so the
// extension has no hard dependency on it: without the Python extension, perflsp still runs from
// `perflsp.interpreter` or PATH.
import * as vscode from "vscode";

const PYTHON_EXTENSION = "ms-python.python";

interface EnvironmentPath {
  id: string;
  path: string;
}

interface ResolvedEnvironment {
  executable: { uri?: vscode.Uri };
}

interface PythonApi {
  environments: {
    getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
    resolveEnvironment(environment: EnvironmentPath | string): Promise<ResolvedEnvironment | undefined>;
    readonly onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
  };
}

async function api(): Promise<PythonApi | undefined> {
  const extension = vscode.extensions.getExtension<PythonApi>(PYTHON_EXTENSION);
  if (!extension) return undefined;
  try {
    const exports = extension.isActive ? extension.exports : await extension.activate();
    return exports?.environments ? exports : undefined;
  } catch {
    return undefined; // an old or broken Python extension: fall back to the other sources
  }
}

/** The selected interpreter for `resource` as a command (`["/venv/bin/python"]`), or undefined. */
export async function selectedInterpreter(resource?: vscode.Uri): Promise<string[] | undefined> {
  const python = await api();
  if (!python) return undefined;
  const active = python.environments.getActiveEnvironmentPath(resource);
  const resolved = await python.environments.resolveEnvironment(active);
  const executable = resolved?.executable.uri?.fsPath;
  return executable ? [executable] : undefined;
}

/** Calls `listener` whenever the user selects another interpreter; a no-op without the Python extension. */
export async function onInterpreterChanged(listener: () => void): Promise<vscode.Disposable> {
  const python = await api();
  return python ? python.environments.onDidChangeActiveEnvironmentPath(() => listener()) : new vscode.Disposable(() => {});
}

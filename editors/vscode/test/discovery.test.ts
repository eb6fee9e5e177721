import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";

import { afterAll, beforeAll, describe, expect, it } from "vitest";

import {
  commandFromPath, compareVersions, discover, DiscoveryInput, MIN_SERVER_VERSION, parseVersion, pipCommand, RunResult,
} from "../src/discovery";

const OK = (version: string): RunResult => ({ code: 0, stdout: `perflsp ${version}\n`, stderr: "" });
const NO_MODULE: RunResult = { code: 1, stdout: "", stderr: "/venv/bin/python: No module named perflsp\n" };
const ENOENT: RunResult = { code: null, stdout: "", stderr: "", error: "ENOENT (/nope/python)" };

/** A machine where each command line (joined by spaces) answers as given; records what ran. */
function machine(answers: Record<string, RunResult>, opts: {
  path?: string[]; interpreter?: string[]; pythonExtension?: string[]; onPath?: string;
  untrusted?: string[]; which?: Record<string, string>;
} = {}) {
  const ran: string[] = [];
  let askedPythonExtension = 0;
  const input: DiscoveryInput = {
    pathSetting: opts.path ?? [],
    interpreterSetting: opts.interpreter ?? [],
    pythonExtension: async () => {
      askedPythonExtension++;
      return opts.pythonExtension;
    },
    which: async (name) => (name === "perflsp" ? opts.onPath : opts.which?.[name]),
    run: async (command) => {
      const line = command.join(" ");
      ran.push(line);
      return answers[line] ?? { code: null, stdout: "", stderr: "", error: `ENOENT (${command[0]})` };
    },
    untrustedFolders: opts.untrusted ?? [],
  };
  return { input, ran, askedPythonExtension: () => askedPythonExtension };
}

describe("parseVersion", () => {
  it("reads `perflsp --version`", () => {
    expect(parseVersion("perflsp 0.1.0\n")).toBe("0.1.0");
    expect(parseVersion("perflsp 1.2.3rc1")).toBe("1.2.3rc1");
    expect(parseVersion("perflsp 0.2.0.dev3+g1234")).toBe("0.2.0.dev3+g1234");
  });
  it("finds the line among warnings printed before it", () => {
    expect(parseVersion("DeprecationWarning: something\nperflsp 0.4.1\n")).toBe("0.4.1");
  });
  it("rejects another program's version", () => {
    expect(parseVersion("ruff 0.6.0")).toBeUndefined();
    expect(parseVersion("perflsp: error: unknown option")).toBeUndefined();
  });
});

describe("compareVersions", () => {
  it("compares release numbers numerically", () => {
    expect(compareVersions("0.10.0", "0.9.9")).toBe(1);
    expect(compareVersions("0.1.0", "0.1.0")).toBe(0);
    expect(compareVersions("0.1", "0.1.0")).toBe(0);
    expect(compareVersions("0.0.9", MIN_SERVER_VERSION)).toBe(-1);
  });
  it("puts pre-releases before the release", () => {
    expect(compareVersions("0.2.0rc1", "0.2.0")).toBe(-1);
    expect(compareVersions("0.2.0", "0.2.0.dev1")).toBe(1);
  });
});

describe("pipCommand", () => {
  it("names the interpreter the server would run on", () => {
    expect(pipCommand(["/work/venv/bin/python"])).toBe("/work/venv/bin/python -m pip install /path/to/perflsp");
    expect(pipCommand(["/work/venv/bin/python"], true)).toBe("/work/venv/bin/python -m pip install -U /path/to/perflsp");
  });
  it("quotes paths with spaces and falls back to python3", () => {
    expect(pipCommand(["/Users/a b/venv/bin/python"])).toBe('"/Users/a b/venv/bin/python" -m pip install /path/to/perflsp');
    expect(pipCommand(undefined)).toBe("python3 -m pip install /path/to/perflsp");
    expect(pipCommand(["py", "-3.11"])).toBe("py -3.11 -m pip install /path/to/perflsp");
  });
});

describe("commandFromPath", () => {
  it("appends `serve` to a lone executable, like ruff.path", () => {
    expect(commandFromPath(["/venv/bin/perflsp"])).toEqual({ argv: ["/venv/bin/perflsp", "serve"], cli: ["/venv/bin/perflsp"] });
  });
  it("keeps a full command and knows its CLI part", () => {
    expect(commandFromPath(["/py", "-m", "perflsp", "serve"])).toEqual({
      argv: ["/py", "-m", "perflsp", "serve"], cli: ["/py", "-m", "perflsp"], python: ["/py"],
    });
    expect(commandFromPath(["uv", "run", "perflsp", "serve"])).toEqual({
      argv: ["uv", "run", "perflsp", "serve"], cli: ["uv", "run", "perflsp"],
    });
  });
  it("has no CLI part for a wrapper without `serve`", () => {
    expect(commandFromPath(["/bin/wrapper", "--flag"]).cli).toBeUndefined();
  });
});

describe("discover", () => {
  it("uses perflsp.path first and checks its version through its CLI part", async () => {
    const m = machine({ "/py -m perflsp --version": OK("0.1.0"), "/usr/bin/perflsp --version": OK("0.3.0") },
      { path: ["/py", "-m", "perflsp", "serve"], interpreter: ["/other/python"], onPath: "/usr/bin/perflsp" });
    const found = await discover(m.input);
    expect(found.ok && found.server).toEqual({
      command: "/py", args: ["-m", "perflsp", "serve"], version: "0.1.0", source: "perflsp.path", cli: ["/py", "-m", "perflsp"],
      python: ["/py"],
    });
    expect(m.ran).toEqual(["/py -m perflsp --version"]); // nothing else was tried
    expect(m.askedPythonExtension()).toBe(0);
  });

  it("reports a broken perflsp.path instead of silently running another perflsp", async () => {
    const m = machine({ "/usr/bin/perflsp --version": OK("0.1.0") }, { path: ["/nope/perflsp"], onPath: "/usr/bin/perflsp" });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.message).toContain("perflsp.path (/nope/perflsp serve) does not work: ENOENT");
    expect(found.badSetting).toBe("perflsp.path");
    expect(m.ran).toEqual(["/nope/perflsp --version"]);
  });

  it("runs `<python> -m perflsp serve` with perflsp.interpreter before asking the Python extension", async () => {
    const m = machine({ "/venv/bin/python -m perflsp --version": OK("0.1.0") },
      { interpreter: ["/venv/bin/python"], pythonExtension: ["/ext/python"] });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({
      command: "/venv/bin/python", args: ["-m", "perflsp", "serve"], source: "perflsp.interpreter", python: ["/venv/bin/python"],
    });
    expect(m.askedPythonExtension()).toBe(0);
  });

  it("keeps the arguments of a multi-part interpreter command", async () => {
    const m = machine({ "py -3.11 -m perflsp --version": OK("0.2.0") }, { interpreter: ["py", "-3.11"] });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: "py", args: ["-3.11", "-m", "perflsp", "serve"], cli: ["py", "-3.11", "-m", "perflsp"] });
  });

  it("uses the Python extension's interpreter when perflsp.interpreter is empty", async () => {
    const m = machine({ "/ext/python -m perflsp --version": OK("0.1.0") }, { pythonExtension: ["/ext/python"] });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: "/ext/python", source: "Python extension", version: "0.1.0" });
  });

  it("falls back to perflsp on PATH when the interpreter lacks perflsp", async () => {
    const m = machine({ "/ext/python -m perflsp --version": NO_MODULE, "/usr/local/bin/perflsp --version": OK("0.1.0") },
      { pythonExtension: ["/ext/python"], onPath: "/usr/local/bin/perflsp" });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: "/usr/local/bin/perflsp", args: ["serve"], source: "PATH" });
    expect(found.tried[0]).toContain("No module named perflsp");
  });

  it("says exactly what to install into the selected interpreter when nothing is found", async () => {
    const m = machine({ "/ext/python -m perflsp --version": NO_MODULE }, { pythonExtension: ["/ext/python"] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.pipCommand).toBe("/ext/python -m pip install /path/to/perflsp");
    expect(found.message).toBe(
      "perflsp's language server is not installed in the Python environment /ext/python. " +
      "Install it with: /ext/python -m pip install /path/to/perflsp");
    expect(found.tried).toEqual([
      "Python extension: /ext/python -m perflsp: exit status 1: /venv/bin/python: No module named perflsp",
      "PATH: no `perflsp` executable",
    ]);
  });

  it("suggests python3 and choosing an interpreter when there is none", async () => {
    const found = await discover(machine({}).input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.pipCommand).toBe("python3 -m pip install /path/to/perflsp");
    expect(found.message).toContain("select an interpreter in the Python extension, or set perflsp.interpreter");
  });

  it("asks to upgrade a server older than the extension needs", async () => {
    const m = machine({ "/venv/bin/python -m perflsp --version": OK("0.0.1") }, { interpreter: ["/venv/bin/python"] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.pipCommand).toBe("/venv/bin/python -m pip install -U /path/to/perflsp");
    expect(found.message).toContain(`perflsp 0.0.1 in the Python environment /venv/bin/python is older than ${MIN_SERVER_VERSION}`);
  });

  it("treats a missing interpreter like one without perflsp", async () => {
    const m = machine({ "/nope/python -m perflsp --version": ENOENT }, { interpreter: ["/nope/python"] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    expect(found.tried[0]).toBe("perflsp.interpreter: /nope/python -m perflsp: ENOENT (/nope/python)");
  });
});

describe("discover in an untrusted workspace", () => {
  // A cloned repository with a committed venv, and a python of the user's outside it.
  let root: string;
  let workspace: string;
  let venvPython: string;
  let userPython: string;
  const NOT_RUN = "is inside the untrusted workspace: not run (trust the workspace to use it)";

  beforeAll(() => {
    root = mkdtempSync(path.join(tmpdir(), "perflsp-trust-"));
    workspace = path.join(root, "cloned");
    mkdirSync(path.join(workspace, ".venv", "bin"), { recursive: true });
    mkdirSync(path.join(root, "user", "bin"), { recursive: true });
    userPython = path.join(root, "user", "bin", "python");
    writeFileSync(userPython, "");
    venvPython = path.join(workspace, ".venv", "bin", "python");
    symlinkSync(userPython, venvPython); // as venvs do: the venv is the folder's all the same
    symlinkSync(workspace, path.join(root, "link"));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("never runs the Python extension's interpreter when it is the workspace's, and says so", async () => {
    const m = machine({ "/usr/bin/perflsp --version": OK("0.1.0") },
      { pythonExtension: [venvPython], onPath: "/usr/bin/perflsp", untrusted: [workspace] });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: "/usr/bin/perflsp", source: "PATH" });
    expect(m.ran).toEqual(["/usr/bin/perflsp --version"]);
    expect(found.tried).toEqual([`Python extension: ${venvPython} ${NOT_RUN}`]);
  });

  it("skips perflsp.path and perflsp.interpreter that point into it, for an interpreter outside", async () => {
    const m = machine({ [`${userPython} -m perflsp --version`]: OK("0.1.0") }, {
      path: [path.join(workspace, "bin", "perflsp")], interpreter: [venvPython], pythonExtension: [userPython],
      untrusted: [workspace],
    });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: userPython, source: "Python extension" });
    expect(m.ran).toEqual([`${userPython} -m perflsp --version`]);
    expect(found.tried).toEqual([
      `perflsp.path: ${path.join(workspace, "bin", "perflsp")} ${NOT_RUN}`,
      `perflsp.interpreter: ${venvPython} ${NOT_RUN}`,
    ]);
  });

  it("sees through `..` and a symlinked folder", async () => {
    const dotted = path.join(root, "user", "..", "cloned", ".venv", "bin", "python");
    const m = machine({}, { interpreter: [dotted], pythonExtension: [venvPython], untrusted: [path.join(root, "link")] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    expect(m.ran).toEqual([]);
    expect(found.tried).toEqual([
      `perflsp.interpreter: ${dotted} ${NOT_RUN}`, `Python extension: ${venvPython} ${NOT_RUN}`,
      "PATH: no `perflsp` executable",
    ]);
  });

  it("looks a bare name up on PATH, and refuses a perflsp found there inside the workspace", async () => {
    const m = machine({}, {
      interpreter: ["python3"], which: { python3: venvPython }, onPath: path.join(workspace, ".venv", "bin", "perflsp"),
      untrusted: [workspace],
    });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    expect(m.ran).toEqual([]);
    expect(found.tried[0]).toBe(`perflsp.interpreter: ${venvPython} ${NOT_RUN}`);
    expect(found.tried.at(-1)).toBe(`PATH: ${path.join(workspace, ".venv", "bin", "perflsp")} ${NOT_RUN}`);
  });

  it("runs the workspace's own interpreter once the workspace is trusted", async () => {
    const m = machine({ [`${venvPython} -m perflsp --version`]: OK("0.1.0") }, { pythonExtension: [venvPython] });
    const found = await discover(m.input);
    expect(found.ok && found.server).toMatchObject({ command: venvPython, source: "Python extension" });
  });
});

import { describe, expect, it } from "vitest";

import {
  commandFromPath, compareVersions, discover, DiscoveryInput, MIN_SERVER_VERSION, parseVersion, pipCommand, RunResult,
} from "../src/discovery";

const OK = (version: string): RunResult => ({ code: 0, stdout: `perflsp ${version}\n`, stderr: "" });
const NO_MODULE: RunResult = { code: 1, stdout: "", stderr: "/venv/bin/python: No module named perflsp\n" };
const ENOENT: RunResult = { code: null, stdout: "", stderr: "", error: "ENOENT (/nope/python)" };

/** A machine where each command line (joined by spaces) answers as given; records what ran. */
function machine(answers: Record<string, RunResult>, opts: {
  path?: string[]; interpreter?: string[]; pythonExtension?: string[]; onPath?: string;
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
    which: async (name) => (name === "perflsp" ? opts.onPath : undefined),
    run: async (command) => {
      const line = command.join(" ");
      ran.push(line);
      return answers[line] ?? { code: null, stdout: "", stderr: "", error: `ENOENT (${command[0]})` };
    },
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
    expect(pipCommand(["/work/venv/bin/python"])).toBe("/work/venv/bin/python -m pip install perflsp");
    expect(pipCommand(["/work/venv/bin/python"], true)).toBe("/work/venv/bin/python -m pip install -U perflsp");
  });
  it("quotes paths with spaces and falls back to python3", () => {
    expect(pipCommand(["/Users/a b/venv/bin/python"])).toBe('"/Users/a b/venv/bin/python" -m pip install perflsp');
    expect(pipCommand(undefined)).toBe("python3 -m pip install perflsp");
    expect(pipCommand(["py", "-3.11"])).toBe("py -3.11 -m pip install perflsp");
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
    expect(found.pipCommand).toBe("/ext/python -m pip install perflsp");
    expect(found.message).toBe(
      "perflsp's language server is not installed in the Python environment /ext/python. " +
      "Install it with: /ext/python -m pip install perflsp");
    expect(found.tried).toEqual([
      "Python extension: /ext/python -m perflsp: exit status 1: /venv/bin/python: No module named perflsp",
      "PATH: no `perflsp` executable",
    ]);
  });

  it("suggests python3 and choosing an interpreter when there is none", async () => {
    const found = await discover(machine({}).input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.pipCommand).toBe("python3 -m pip install perflsp");
    expect(found.message).toContain("select an interpreter in the Python extension, or set perflsp.interpreter");
  });

  it("asks to upgrade a server older than the extension needs", async () => {
    const m = machine({ "/venv/bin/python -m perflsp --version": OK("0.0.1") }, { interpreter: ["/venv/bin/python"] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    if (found.ok) return;
    expect(found.pipCommand).toBe("/venv/bin/python -m pip install -U perflsp");
    expect(found.message).toContain(`perflsp 0.0.1 in the Python environment /venv/bin/python is older than ${MIN_SERVER_VERSION}`);
  });

  it("treats a missing interpreter like one without perflsp", async () => {
    const m = machine({ "/nope/python -m perflsp --version": ENOENT }, { interpreter: ["/nope/python"] });
    const found = await discover(m.input);
    expect(found.ok).toBe(false);
    expect(found.tried[0]).toBe("perflsp.interpreter: /nope/python -m perflsp: ENOENT (/nope/python)");
  });
});

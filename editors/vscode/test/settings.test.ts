import { describe, expect, it } from "vitest";

import {
  anchorExecutable, CLIENT_ONLY, expandVariables, Lookup, needsRestart, profilingAllowed, serverSettings,
} from "../src/settings";

// The contributed defaults (package.json), as VS Code reports them for keys nobody set.
const DEFAULTS: Record<string, unknown> = {
  path: [], interpreter: [], lintOn: "type", workspaceDiagnostics: false, select: [], ignore: [], severity: {}, preview: false,
  "profile.enabled": true, "profile.timeout": 300, logLevel: "info",
};

/** A lookup where `user` holds what the user set and every other key has its default. */
function lookup(user: Record<string, unknown> = {}): Lookup {
  return (key) => (key in user ? { value: user[key], set: true } : { value: DEFAULTS[key], set: false });
}

const TRUSTED = { trusted: true };

describe("serverSettings", () => {
  it("sends the server's own keys with their defaults and no [tool.perflsp] override", () => {
    expect(serverSettings(lookup(), TRUSTED)).toEqual({
      run: "onType", workspaceDiagnostics: false, logLevel: "info", profile: { enabled: true },
    });
  });

  it("maps lintOn to the server's `run`", () => {
    expect(serverSettings(lookup({ lintOn: "save" }), TRUSTED).run).toBe("onSave");
    expect(serverSettings(lookup({ lintOn: "type" }), TRUSTED).run).toBe("onType");
  });

  it("passes an unknown lintOn through so the server's error names it", () => {
    expect(serverSettings(lookup({ lintOn: "sometimes" }), TRUSTED).run).toBe("sometimes");
  });

  it("forwards what the user set, under the keys the server reads", () => {
    const out = serverSettings(lookup({
      select: ["PFL1", "PFL502"], ignore: ["PFL104"], severity: { PFL1: "error" }, "profile.timeout": 60,
      workspaceDiagnostics: true, logLevel: "debug",
    }), { trusted: true, interpreter: ["/venv/bin/python"] });
    expect(out).toEqual({
      run: "onType", workspaceDiagnostics: true, logLevel: "debug", interpreter: ["/venv/bin/python"],
      profile: { enabled: true, timeout: 60 }, select: ["PFL1", "PFL502"], ignore: ["PFL104"], severity: { PFL1: "error" },
    });
  });

  it("forwards preview only when the user set it, off included", () => {
    expect(serverSettings(lookup(), TRUSTED)).not.toHaveProperty("preview");
    expect(serverSettings(lookup({ preview: true }), TRUSTED).preview).toBe(true);
    expect(serverSettings(lookup({ preview: false }), TRUSTED).preview).toBe(false);
  });

  it("leaves out an override set to an empty list or table: the project's config decides", () => {
    const out = serverSettings(lookup({ select: [], ignore: [], severity: {} }), TRUSTED);
    expect(out).not.toHaveProperty("select");
    expect(out).not.toHaveProperty("ignore");
    expect(out).not.toHaveProperty("severity");
  });

  it("leaves out a default profile timeout so [tool.perflsp] profile-timeout applies", () => {
    expect(serverSettings(lookup(), TRUSTED).profile).toEqual({ enabled: true });
  });

  it("switches profiling off in an untrusted workspace, whatever the setting says", () => {
    expect(serverSettings(lookup({ "profile.enabled": true }), { trusted: false }).profile.enabled).toBe(false);
    expect(serverSettings(lookup({ "profile.enabled": false }), TRUSTED).profile.enabled).toBe(false);
  });

  it("never sends how the server is started", () => {
    const out = serverSettings(lookup({ path: ["/x/perflsp"] }), TRUSTED);
    for (const key of [...CLIENT_ONLY, "lintOn"]) expect(out).not.toHaveProperty(key);
  });
});

describe("needsRestart", () => {
  it("restarts for the server command and the interpreter only", () => {
    const changed = (...keys: string[]) => (section: string) => keys.includes(section);
    expect(needsRestart(changed("perflsp.path"))).toBe(true);
    expect(needsRestart(changed("perflsp.interpreter"))).toBe(true);
    expect(needsRestart(changed("perflsp.select", "perflsp.lintOn", "perflsp.logLevel"))).toBe(false);
  });
});

describe("profilingAllowed", () => {
  it("needs a trusted workspace and the setting on", () => {
    expect(profilingAllowed(lookup(), true)).toBe(true);
    expect(profilingAllowed(lookup(), false)).toBe(false);
    expect(profilingAllowed(lookup({ "profile.enabled": false }), true)).toBe(false);
  });
});

describe("expandVariables", () => {
  const vars = { workspaceFolder: "/work/proj", userHome: "/home/me", env: { VENV: "/opt/venv" } };
  it("expands the variables the Python tool extensions support", () => {
    expect(expandVariables(["${workspaceFolder}/.venv/bin/python"], vars)).toEqual(["/work/proj/.venv/bin/python"]);
    expect(expandVariables(["${userHome}/bin/perflsp", "~/x", "~"], vars)).toEqual(["/home/me/bin/perflsp", "/home/me/x", "/home/me"]);
    expect(expandVariables(["${env:VENV}/bin/python", "${env:NOPE}x"], vars)).toEqual(["/opt/venv/bin/python", "x"]);
  });
  it("leaves everything else as written", () => {
    expect(expandVariables(["-m", "perflsp", "a~b", "${unknown}"], vars)).toEqual(["-m", "perflsp", "a~b", "${unknown}"]);
    expect(expandVariables(["${workspaceFolder}/py"], { ...vars, workspaceFolder: undefined })).toEqual(["${workspaceFolder}/py"]);
  });
});

describe("anchorExecutable", () => {
  it("makes a relative executable the workspace folder's, since processes start outside it", () => {
    expect(anchorExecutable([".venv/bin/python"], "/work/proj")).toEqual(["/work/proj/.venv/bin/python"]);
    expect(anchorExecutable(["bin/perflsp", "serve"], "/work/proj")).toEqual(["/work/proj/bin/perflsp", "serve"]);
  });
  it("leaves absolute paths, bare names (PATH), and commands without a folder alone", () => {
    expect(anchorExecutable(["/opt/venv/bin/python", "-m"], "/work/proj")).toEqual(["/opt/venv/bin/python", "-m"]);
    expect(anchorExecutable(["python3"], "/work/proj")).toEqual(["python3"]);
    expect(anchorExecutable([".venv/bin/python"], undefined)).toEqual([".venv/bin/python"]);
    expect(anchorExecutable([], "/work/proj")).toEqual([]);
  });
});

import { describe, expect, it } from "vitest";

import {
  BREAKS_COMMAND, COMPILE_COMMAND, describeProfileResult, enclosingFunction, PROFILE_COMMAND, PROFILE_COMMANDS,
  progressTitle, RECORD_COMMAND,
} from "../src/profile";

const SOURCE = `import torch


@perflsp.profile(setup=make_inputs)
def attention(q, k,
              v):
    scores = q @ k.transpose(-2, -1)

    return scores.softmax(-1) @ v


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()

    async def forward(self, x):
        def helper(y):
            return y * 2
        for _ in range(3):
            x = helper(x)
        return x

TOP = 1
`.split("\n");

const at = (text: string) => SOURCE.findIndex((l) => l.includes(text));

describe("enclosingFunction", () => {
  it("finds the function around a body line", () => {
    expect(enclosingFunction(SOURCE, at("scores = q @"))).toBe("attention");
  });
  it("counts the def line, a continuation line and the decorator as the function", () => {
    expect(enclosingFunction(SOURCE, at("def attention"))).toBe("attention");
    expect(enclosingFunction(SOURCE, at("v):"))).toBe("attention");
    expect(enclosingFunction(SOURCE, at("@perflsp.profile"))).toBe("attention");
  });
  it("belongs a blank line to the code above it", () => {
    expect(enclosingFunction(SOURCE, at("scores = q @") + 1)).toBe("attention");
  });
  it("qualifies methods with their class, as the runtime's targets do", () => {
    expect(enclosingFunction(SOURCE, at("super().__init__()"))).toBe("Block.__init__");
    expect(enclosingFunction(SOURCE, at("x = helper(x)"))).toBe("Block.forward");
  });
  it("picks the outer function of a nested one (nested functions are no targets)", () => {
    expect(enclosingFunction(SOURCE, at("return y * 2"))).toBe("Block.forward");
  });
  it("finds nothing outside functions", () => {
    expect(enclosingFunction(SOURCE, at("import torch"))).toBeUndefined();
    expect(enclosingFunction(SOURCE, at("TOP = 1"))).toBeUndefined();
    expect(enclosingFunction(SOURCE, at("class Block"))).toBeUndefined();
    expect(enclosingFunction(SOURCE, 10_000)).toBeUndefined();
  });
});

describe("describeProfileResult", () => {
  it("shows the headline of the server's answer", () => {
    const answer = { status: "ok", regime: "compute-bound", headline: "compute-bound · 395 µs · 181% of 47.2 GFLOP/s", exit_code: 0 };
    expect(describeProfileResult(answer)).toEqual({
      text: "compute-bound · 395 µs · 181% of 47.2 GFLOP/s", failed: false, shownByServer: false,
    });
    expect(describeProfileResult({ status: "ok", regime: "sync-bound" }).text).toBe("sync-bound");
  });
  it("leaves refusals and errors to the message the server already showed", () => {
    expect(describeProfileResult({ status: "error", kind: "timeout", message: "no result within 300 s" }))
      .toEqual({ text: "no result within 300 s", failed: true, shownByServer: true });
    expect(describeProfileResult({ status: "cancelled", message: "cancelled" }))
      .toEqual({ text: "cancelled", failed: false, shownByServer: true });
    expect(describeProfileResult({ status: "busy" }).text).toBe("busy");
  });
  it("understands a bare profile result", () => {
    const result = { verdict: { regime: "memory-bound", summary: "31% of the measured bandwidth", reasons: [], levers: [], notes: [] } };
    expect(describeProfileResult(result).text).toBe("memory-bound: 31% of the measured bandwidth");
    expect(describeProfileResult({ verdict: null, error: { kind: "timeout", message: "no result within 300 s" } }))
      .toEqual({ text: "profiling failed: no result within 300 s", failed: true, shownByServer: false });
  });
  it("shows a plain string as it is", () => {
    expect(describeProfileResult("sync-bound")).toEqual({ text: "sync-bound", failed: false, shownByServer: false });
    expect(describeProfileResult(null).failed).toBe(false);
  });
});

describe("progressTitle", () => {
  it("names what each command that runs the user's code does", () => {
    expect(progressTitle(PROFILE_COMMAND, "step")).toBe("perflsp: measuring step");
    expect(progressTitle(COMPILE_COMMAND, "step")).toBe("perflsp: trying torch.compile on step");
    expect(progressTitle(BREAKS_COMMAND, "step")).toBe("perflsp: finding graph breaks in step");
    expect(progressTitle(RECORD_COMMAND, "the run")).toBe("perflsp: recording a run of the program");
    // All of them run the user's code: the extension checks trust and saves the file first.
    expect(PROFILE_COMMANDS).toEqual(
      expect.arrayContaining([PROFILE_COMMAND, COMPILE_COMMAND, BREAKS_COMMAND, RECORD_COMMAND]));
  });
});

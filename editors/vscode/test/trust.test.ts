import { describe, expect, it } from "vitest";

import { isWithin } from "../src/trust";

describe("isWithin", () => {
  it("holds for the folder and what lies below it", () => {
    expect(isWithin("/ws", "/ws")).toBe(true);
    expect(isWithin("/ws/.venv/bin/python", "/ws")).toBe(true);
    expect(isWithin("/ws/..hidden/python", "/ws")).toBe(true);
  });
  it("does not hold for a sibling that shares the folder's name as a prefix, nor for its parent", () => {
    expect(isWithin("/ws-other/python", "/ws")).toBe(false);
    expect(isWithin("/usr/bin/python3", "/ws")).toBe(false);
    expect(isWithin("/", "/ws")).toBe(false);
  });
});

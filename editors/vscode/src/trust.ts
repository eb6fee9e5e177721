// Which files of the workspace the extension may not run before the user trusts it.
//
// Opening a folder must not run code of the folder's choosing. The extension starts perflsp's
// processes outside the workspace (see extension.ts: `python -m` puts the current folder first on
// sys.path, where a `perflsp/` folder would stand in for perflsp), and in an untrusted workspace it
// runs no executable that lies inside it: a committed `.venv`, an interpreter setting or the
// Python extension's choice pointing into it. No `vscode` import: unit-tested on real files.
import { promises as fs } from "node:fs";
import * as path from "node:path";

/** Whether absolute `file` is `folder` itself or lies below it. */
export function isWithin(file: string, folder: string): boolean {
  const relative = path.relative(folder, file);
  return relative === "" || (relative !== ".." && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative));
}

async function realpath(file: string): Promise<string> {
  try {
    return await fs.realpath(file);
  } catch {
    return file; // does not exist (yet): compared as written
  }
}

/**
 * Whether `file` lies inside one of `folders`, however either is spelled: `..` and symlinked
 * folders are resolved on both sides. The file's own last symlink is compared unresolved too: a
 * venv's `bin/python` links to the system's python, yet the venv (its site-packages) is the folder's.
 */
export async function insideAny(file: string, folders: readonly string[]): Promise<boolean> {
  const absolute = path.resolve(file);
  const spellings = [
    absolute,
    path.join(await realpath(path.dirname(absolute)), path.basename(absolute)),
    await realpath(absolute),
  ];
  const roots = (await Promise.all(folders.map(async (folder) => [path.resolve(folder), await realpath(folder)]))).flat();
  return spellings.some((spelling) => roots.some((root) => isWithin(spelling, root)));
}

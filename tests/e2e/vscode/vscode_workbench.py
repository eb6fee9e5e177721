"""Builds the extension and runs code-server with it, all on loopback and outside `$HOME`.

code-server writes into `$HOME` unless told otherwise, and its extension hosts (each with a
perflsp server) outlive it unless the whole process group is killed: every path below points into
one temporary folder, and `stop()` kills the group.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

from vscode_toolchain import EXTENSION_DIR, Unavailable, npm_env, system_npm

# Every gallery URL points at a closed loopback port: code-server otherwise asks open-vsx.
DEAD_GALLERY = json.dumps({
    "serviceUrl": "http://127.0.0.1:9/gallery", "itemUrl": "http://127.0.0.1:9/items",
    "resourceUrlTemplate": "http://127.0.0.1:9/{publisher}/{name}/{version}/{path}",
    "controlUrl": "", "recommendationsUrl": "",
})

# Quiet, predictable workbench: no welcome page, tips, chat side bar or update checks.
USER_SETTINGS = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "chat.disableAIFeatures": True,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
    "update.mode": "none",
    "editor.hover.delay": 200,
    "editor.minimap.enabled": False,
    "files.autoSave": "off",
    "git.enabled": False,
}


def extension_deps(node_home: Path) -> Path:
    """`npm ci` in editors/vscode, again only when package-lock.json changed (as build.sh does)."""
    lock = EXTENSION_DIR / "package-lock.json"
    stamp = EXTENSION_DIR / "node_modules" / ".perflsp-lock-hash"
    digest = hashlib.sha256(lock.read_bytes()).hexdigest()
    if not (stamp.is_file() and stamp.read_text().strip() == digest):
        proc = subprocess.run([system_npm(), "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=EXTENSION_DIR,
                              env=npm_env(node_home), capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            raise Unavailable(f"`npm ci` in {EXTENSION_DIR} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
        stamp.write_text(digest + "\n")
    return EXTENSION_DIR / "node_modules"


def build_vsix(node_home: Path) -> Path:
    """Runs the one build command, `editors/vscode/build.sh`; returns the .vsix it printed."""
    extension_deps(node_home)
    env = npm_env(node_home)
    proc = subprocess.run(["bash", str(EXTENSION_DIR / "build.sh")], env=env, capture_output=True, text=True, timeout=600)
    # A build failure is a bug in the extension, not a machine that cannot run the test.
    assert proc.returncode == 0, f"editors/vscode/build.sh failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    vsix = Path(proc.stdout.strip().splitlines()[-1])
    assert vsix.is_file() and vsix.suffix == ".vsix", f"build.sh printed {vsix}, which is no .vsix"
    return vsix


# Kills process groups once the test process is gone: if pytest itself is killed (a CI timeout),
# no `finally` runs, and code-server's extension hosts (each with a perflsp server) and Chromium
# would otherwise live on for hours.
WATCHDOG = """
import os, signal, sys, time
parent, groups = int(sys.argv[1]), [int(g) for g in sys.argv[2:]]
def alive(kill, target):
    try:
        kill(target, 0)
        return True
    except ProcessLookupError:
        return False
while alive(os.kill, parent) and any(alive(os.killpg, g) for g in groups):
    time.sleep(1)
for g in groups:
    try:
        os.killpg(g, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def reap_when_orphaned(*groups: int) -> None:
    """Starts a watchdog that kills `groups` when this process dies (and ends when they do)."""
    subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), *map(str, groups)],
                     start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)


def kill_group(pgid: int, grace_s: float = 10) -> None:
    """SIGTERM to a process group, then SIGKILL to whatever of it is left after `grace_s`."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_in_group(cmd: List[str], env: Dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """`subprocess.run` whose whole process group (a browser, say) is gone afterwards, even on timeout."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    reap_when_orphaned(proc.pid)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc.pid, grace_s=2)
        out, err = proc.communicate()
        err += f"\n[killed after {timeout:.0f} s]"
    finally:
        kill_group(proc.pid, grace_s=2)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CodeServer:
    def __init__(self, tools_home: Path, node_home: Path, home: Path, workspace: Path):
        self.binary = tools_home / "node_modules" / ".bin" / "code-server"
        self.home = home
        self.workspace = workspace
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = home / "code-server.log"
        self.proc: Optional[subprocess.Popen] = None
        self.user_data = home / "user-data"
        self.extensions = home / "extensions"
        self.env: Dict[str, str] = npm_env(node_home)
        self.env.update(
            HOME=str(home / "home"), XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"),
            XDG_CACHE_HOME=str(home / "cache"), EXTENSIONS_GALLERY=DEAD_GALLERY,
        )
        for key in ("HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
            Path(self.env[key]).mkdir(parents=True, exist_ok=True)
        (home / "config.yaml").write_text("auth: none\ncert: false\n")
        settings = self.user_data / "User" / "settings.json"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps(USER_SETTINGS, indent=2))

    def _args(self) -> List[str]:
        return [str(self.binary), "--config", str(self.home / "config.yaml"), "--user-data-dir", str(self.user_data),
                "--extensions-dir", str(self.extensions)]

    def install(self, vsix: Path) -> str:
        proc = subprocess.run([*self._args(), "--install-extension", str(vsix), "--force"], env=self.env,
                              capture_output=True, text=True, timeout=180)
        assert proc.returncode == 0, f"code-server --install-extension {vsix.name} failed:\n{proc.stdout}\n{proc.stderr}"
        listed = subprocess.run([*self._args(), "--list-extensions", "--show-versions"], env=self.env,
                                capture_output=True, text=True, timeout=120)
        return listed.stdout

    def start(self, timeout: float = 90) -> None:
        log = open(self.log_path, "w")
        # A session of its own: stop() kills the group, extension hosts and perflsp servers included.
        self.proc = subprocess.Popen(
            [*self._args(), "--bind-addr", f"127.0.0.1:{self.port}", "--auth", "none", "--disable-telemetry",
             "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override",
             "--reconnection-grace-time", "10", "--ignore-last-opened", str(self.workspace)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        reap_when_orphaned(self.proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"code-server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"code-server did not answer on {self.url} within {timeout:.0f} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-6000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        # The group outlives its leader (extension hosts, language servers): the whole group goes.
        kill_group(self.proc.pid)
        self.proc.wait(timeout=10)

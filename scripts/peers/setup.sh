#!/usr/bin/env bash
# Installs what `make bench-peers` needs beyond `make build`: Node.js with npm (Debian packages)
# and onnxruntime-node at the version pinned in package-lock.json. Only the Debian and npm
# registries are used: onnxruntime-node's install script, which downloads GPU binaries from
# GitHub, is skipped (its CPU binaries ship inside the npm package).
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	echo "bench-peers setup: installing nodejs and npm (apt-get)" >&2
	sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq nodejs npm
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 16 ]; then
	echo "bench-peers setup: node $(node --version) is too old for onnxruntime-node 1.30 (want >= 16)" >&2
	exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	ONNXRUNTIME_NODE_INSTALL=skip npm ci --ignore-scripts --no-audit --no-fund
fi
node -e 'require("onnxruntime-node")' || {
	echo "bench-peers setup: onnxruntime-node does not load; remove scripts/peers/node_modules and re-run" >&2
	exit 1
}

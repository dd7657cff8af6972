#!/usr/bin/env node
// Runs the claude-host binary of this platform's package (@claude-host/<os>-<cpu>, an optional
// dependency npm installs only where it fits), passing arguments, standard streams and the
// exit status through.
"use strict";

const { spawn } = require("node:child_process");
const path = require("node:path");

const platform = `${process.platform}-${process.arch}`;
const pkg = `@claude-host/${platform}`;

function binary() {
  if (process.env.CLAUDE_HOST_BINARY) {
    return process.env.CLAUDE_HOST_BINARY;
  }
  try {
    return path.join(path.dirname(require.resolve(`${pkg}/package.json`)), "bin", "claude-host");
  } catch {
    console.error(
      `claude-host: no binary for ${platform}: the package ${pkg} is not installed.\n` +
        "It is an optional dependency of claude-host: reinstall without --no-optional / " +
        "--omit=optional, or build from source (cargo install claude-host)."
    );
    process.exit(1);
  }
}

const child = spawn(binary(), process.argv.slice(2), { stdio: "inherit" });

// Ctrl-C reaches the child from the terminal itself (same process group): passing it on would
// deliver it twice. Signals sent to this process alone (an editor stopping its ACP server, a
// service manager) are passed on.
process.on("SIGINT", () => {});
for (const signal of ["SIGTERM", "SIGHUP", "SIGQUIT"]) {
  process.on(signal, () => child.kill(signal));
}

child.on("error", (err) => {
  console.error(`claude-host: cannot run ${binary()}: ${err.message}`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // End the same way, so whoever started us sees the signal.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
  } else {
    process.exit(code ?? 1);
  }
});

// The parts of one real-VS-Code test: the fake upstream (a process of its own), `claude-host
// serve` against it, code-server (VS Code's workbench, with its agent-host bridge pointed at
// the host) and headless Chromium driven by playwright-core. `scripts/vscode-e2e.sh` installs
// everything and passes the paths in the environment.

import { spawn, execFile } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';

const run = promisify(execFile);

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set; run the suite with scripts/vscode-e2e.sh`);
  return v;
}

export const paths = {
  claudeHost: () => need('E2E_CLAUDE_HOST'),
  fakeUpstream: () => need('E2E_FAKE_UPSTREAM'),
  codeServer: () => need('E2E_CODE_SERVER'),
  chromium: () => need('E2E_CHROMIUM'),
  cli: () => need('E2E_CLAUDE_CLI'),
  longTranscript: () => need('E2E_LONG_TRANSCRIPT'),
  out: () => need('E2E_OUT'),
};

/** How long a step waits for what it expects before the test fails. */
export const WAIT = Number(process.env.E2E_WAIT_MS ?? 90_000);

/** Resolves when `pred(line)` holds for a line of `stream`; rejects after `ms`. */
function lineMatching(stream, pred, what, ms = WAIT) {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: stream });
    const timer = setTimeout(() => {
      rl.close();
      reject(new Error(`no ${what} within ${ms} ms`));
    }, ms);
    rl.on('line', (line) => {
      const m = pred(line);
      if (m) {
        clearTimeout(timer);
        rl.close();
        resolve(m);
      }
    });
  });
}

async function freePort() {
  const s = createServer();
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address();
  s.close();
  await once(s, 'close');
  return port;
}

/** A child process whose stderr goes to `log`; with `group`, it leads a process group. */
function child(cmd, args, opts, log, group = false) {
  const p = spawn(cmd, args, { ...opts, stdio: ['pipe', 'pipe', 'pipe'], detached: group });
  p.group = group;
  p.stderr.on('data', (d) => log.push(d.toString()));
  return p;
}

/**
 * Ends a child with SIGTERM (claude-host shuts down gracefully and its keeper ends its CLIs);
 * a group leader's whole group (code-server's extension hosts) is ended with it.
 */
async function stop(p) {
  if (!p) return;
  const signal = (s) => {
    try {
      process.kill(p.group ? -p.pid : p.pid, s);
    } catch {
      // Gone already.
    }
  };
  if (p.exitCode === null && p.signalCode === null) {
    const exited = once(p, 'exit');
    signal('SIGTERM');
    const timer = setTimeout(() => signal('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  }
  // What a group leader left behind in its group.
  if (p.group) signal('SIGKILL');
}

/** The fake GitHub + Copilot upstream, scripted over its stdin. */
export class Fake {
  static async start(log) {
    const p = child(paths.fakeUpstream(), [], {}, log);
    const lines = createInterface({ input: p.stdout });
    const it = lines[Symbol.asyncIterator]();
    const first = await it.next();
    const { url } = JSON.parse(first.value);
    return new Fake(p, it, url);
  }

  constructor(p, it, url) {
    this.p = p;
    this.it = it;
    this.url = url;
  }

  async command(c) {
    this.p.stdin.write(JSON.stringify(c) + '\n');
    const { value } = await this.it.next();
    const answer = JSON.parse(value);
    if (answer.error) throw new Error(`fake upstream: ${answer.error}`);
    return answer;
  }

  /** Scripts a reply: `when` is 'always', 'toolResult' or {lastUserContains}. */
  push(when, reply, times) {
    return this.command({ push: { when, reply, times } });
  }

  /** The last user message of every model request so far. */
  async lastUserTexts() {
    return (await this.command({ requests: true })).lastUserTexts;
  }

  stop() {
    return stop(this.p);
  }
}

/** `claude-host serve` with a home of its own, against the fake. */
export class Host {
  constructor({ fake, dir, signedIn, env = {}, log }) {
    this.fake = fake;
    this.dir = dir;
    this.extraEnv = env;
    this.home = join(dir, 'host-home');
    this.work = join(dir, 'work');
    mkdirSync(this.work, { recursive: true });
    this.signedIn = signedIn;
    this.log = log;
    this.token = 'e2e-connection-token_0123';
    this.port = 0;
  }

  env() {
    const env = {
      PATH: process.env.PATH,
      HOME: this.dir,
      LANG: 'C.UTF-8',
      CLAUDE_HOST_HOME: this.home,
      CLAUDE_HOST_GITHUB_URL: this.fake.url,
      CLAUDE_HOST_GITHUB_API_URL: this.fake.url,
      CLAUDE_HOST_CLAUDE_PATH: paths.cli(),
      CLAUDE_HOST_CONNECTION_TOKEN: this.token,
      // Each AHP request is logged (method, channel): what VS Code asked, in order.
      CLAUDE_HOST_LOG: process.env.E2E_HOST_LOG ?? 'info,claude_host_ahp::server=debug,claude_host_agent::session=debug',
    };
    // The credential `claude-host login` would store; the fake accepts this token.
    if (this.signedIn) env.GH_TOKEN = 'gho_fake_github_token';
    return { ...env, ...this.extraEnv };
  }

  /** Starts (or starts again, on the same port) and waits for `READY:<port>`. */
  async start() {
    this.p = child(
      paths.claudeHost(),
      ['serve', '--port', String(this.port), '--cwd', this.work],
      { env: this.env(), cwd: this.work },
      this.log,
    );
    this.port = Number(
      await lineMatching(this.p.stdout, (l) => l.match(/^READY:(\d+)$/)?.[1], 'READY line'),
    );
    this.p.stdout.resume();
  }

  async restart() {
    await stop(this.p);
    await this.start();
  }

  stop() {
    return stop(this.p);
  }

  /** `claude-host <args…> --json` over the same home, parsed. */
  async json(...args) {
    const { stdout } = await run(paths.claudeHost(), [...args, '--json'], {
      env: this.env(),
      cwd: this.work,
    });
    return JSON.parse(stdout);
  }

  /** The host's sessions (`claude-host sessions list`). */
  async sessions() {
    return (await this.json('sessions', 'list')).sessions;
  }

  /**
   * Writes a generated session of about `bytes` (the testkit's `long-transcript`) that the
   * host lists, with its first prompt and its last answer given texts of their own; its id
   * and sidebar title.
   */
  async longSession(bytes, { oldest, newest }) {
    const { stdout } = await run(paths.longTranscript(), [
      join(this.dir, '.claude'),
      this.work,
      String(bytes),
    ]);
    const { sessionId, path } = JSON.parse(stdout);
    let text = readFileSync(path, 'utf8');
    // The first user message (a queue-operation line before it carries the same text).
    const first = /"role": ?"user", ?"content": ?"write a file then run echo"/;
    if (!first.test(text)) throw new Error(`no first prompt in ${path}`);
    text = text.replace(first, `"role":"user","content":${JSON.stringify(oldest)}`);
    const last = '"Hello from the fake server."';
    const at = text.lastIndexOf(last);
    if (at < 0) throw new Error(`no last answer in ${path}`);
    text = `${text.slice(0, at)}${JSON.stringify(newest)}${text.slice(at + last.length)}`;
    writeFileSync(path, text);
    const listed = await waitFor(async () => {
      const s = await this.sessions();
      return s.find((x) => x.id === sessionId);
    }, `session ${sessionId} in \`claude-host sessions list\``);
    return { id: sessionId, title: listed.summary };
  }

  /** A session's conversation (`claude-host sessions show`). */
  async transcript(id) {
    return (await this.json('sessions', 'show', id)).entries;
  }

  /** The tool results in the transcript of the host's one session, once it has one. */
  async toolResults() {
    const [session] = await waitFor(async () => {
      const s = await this.sessions();
      return s.length === 1 && s;
    }, 'the session');
    return (await this.transcript(session.id))
      .flatMap((e) => (Array.isArray(e.message?.content) ? e.message.content : []))
      .filter((b) => b.type === 'tool_result');
  }
}

/** code-server (VS Code 1.139.1's workbench) whose agent-host bridge points at `host`. */
export class CodeServer {
  constructor({ host, dir, settings, log }) {
    this.host = host;
    this.dir = join(dir, 'code-server');
    this.settings = settings;
    this.log = log;
  }

  async start() {
    const userData = join(this.dir, 'user-data');
    mkdirSync(join(userData, 'User'), { recursive: true });
    writeFileSync(
      join(userData, 'User', 'settings.json'),
      JSON.stringify(
        {
          'workbench.startupEditor': 'none',
          'workbench.tips.enabled': false,
          'security.workspace.trust.enabled': false,
          'telemetry.telemetryLevel': 'off',
          ...this.settings,
        },
        null,
        2,
      ),
    );
    this.port = await freePort();
    const cs = paths.codeServer();
    this.p = child(
      process.execPath,
      [
        join(cs, 'out', 'node', 'entry.js'),
        '--auth', 'none',
        '--bind-addr', `127.0.0.1:${this.port}`,
        '--disable-telemetry',
        '--disable-update-check',
        '--disable-workspace-trust',
        '--user-data-dir', userData,
        '--extensions-dir', join(this.dir, 'extensions'),
        '--vscode-option', `agent-host-bridge-port=${this.host.port}`,
        '--vscode-option', 'agent-host-bridge-host=127.0.0.1',
        '--vscode-option', `agent-host-bridge-connection-token=${this.host.token}`,
        this.host.work,
      ],
      {
        env: {
          PATH: process.env.PATH,
          HOME: this.dir,
          XDG_CONFIG_HOME: join(this.dir, 'config'),
          XDG_DATA_HOME: join(this.dir, 'data'),
          LANG: 'C.UTF-8',
        },
      },
      this.log,
      true,
    );
    this.p.stdout.on('data', (d) => this.log.push(d.toString()));
    await waitFor(async () => {
      try {
        const r = await fetch(`http://127.0.0.1:${this.port}/healthz`);
        return r.ok;
      } catch {
        return false;
      }
    }, 'code-server to answer');
  }

  url() {
    return `http://127.0.0.1:${this.port}/?folder=${encodeURIComponent(this.host.work)}`;
  }

  stop() {
    return stop(this.p);
  }
}

/** Polls `check` (every 200 ms) until it returns something truthy; fails after `ms`. */
export async function waitFor(check, what, ms = WAIT) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** One browser with windows (pages) on a code-server; console lines are kept per page. */
export class Browser {
  static async launch() {
    const b = await chromium.launch({
      executablePath: paths.chromium(),
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-dev-shm-usage'],
    });
    return new Browser(b);
  }

  constructor(b) {
    this.b = b;
    this.pages = [];
  }

  async window(url) {
    const ctx = await this.b.newContext({ viewport: { width: 1400, height: 900 } });
    const page = await ctx.newPage();
    page.setDefaultTimeout(WAIT);
    page.consoleLines = [];
    page.on('console', (m) => page.consoleLines.push(m.text()));
    await page.goto(url);
    this.pages.push(page);
    return page;
  }

  close() {
    return this.b.close();
  }
}

/** Everything one test needs, stopped in reverse order by `close()`. */
export class Rig {
  static async start(t, { signedIn = true, settings = {}, hostEnv = {} } = {}) {
    const name = t.name.replace(/[^a-z0-9]+/gi, '-').toLowerCase();
    const dir = mkdtempSync(join(tmpdir(), 'claude-host-e2e-'));
    const out = join(paths.out(), name);
    rmSync(out, { recursive: true, force: true });
    mkdirSync(out, { recursive: true });
    const rig = new Rig(dir, out);
    try {
      rig.fake = await Fake.start(rig.logs.fake);
      rig.host = new Host({ fake: rig.fake, dir, signedIn, env: hostEnv, log: rig.logs.host });
      await rig.host.start();
      rig.codeServer = new CodeServer({ host: rig.host, dir, settings, log: rig.logs.codeServer });
      await rig.codeServer.start();
      rig.browser = await Browser.launch();
    } catch (e) {
      await rig.close(false);
      throw e;
    }
    return rig;
  }

  constructor(dir, out) {
    this.dir = dir;
    this.out = out;
    this.logs = { fake: [], host: [], codeServer: [] };
    this.shots = 0;
  }

  /** Runs one named step; on failure keeps a screenshot of every window. */
  async step(name, fn) {
    try {
      return await fn();
    } catch (e) {
      await this.screenshots(name);
      throw new Error(`step "${name}": ${e.message}`, { cause: e });
    }
  }

  async screenshots(label) {
    const n = String(++this.shots).padStart(2, '0');
    for (const [i, page] of (this.browser?.pages ?? []).entries()) {
      const base = join(this.out, `${n}-${label.replace(/[^a-z0-9]+/gi, '-')}-window${i + 1}`);
      await page.screenshot({ path: `${base}.png` }).catch(() => {});
      writeFileSync(`${base}.console.txt`, page.consoleLines.join('\n'));
    }
  }

  async close(passed = true) {
    for (const [i, page] of (this.browser?.pages ?? []).entries()) {
      writeFileSync(join(this.out, `window${i + 1}.console.txt`), page.consoleLines.join('\n'));
    }
    await this.browser?.close().catch(() => {});
    await this.codeServer?.stop();
    await this.host?.stop();
    await this.fake?.stop();
    for (const [k, v] of Object.entries(this.logs)) writeFileSync(join(this.out, `${k}.log`), v.join(''));
    if (!passed && this.host) console.error(`vscode-e2e: VS Code started the chat by ${this.newChatFlow()}`);
    if (passed) rmSync(this.dir, { recursive: true, force: true });
  }

  /**
   * Which of VS Code's two ways of starting a new chat this run took (docs/AHP.md, "A turn
   * sent with its chat's subscribe"), read from the host's request log.
   */
  newChatFlow() {
    const log = (this.logs.host ?? []).join('');
    const subscribe = log.search(/method=subscribe channel=claude:/);
    const create = log.search(/method=createSession/);
    if (create < 0) return 'no createSession at all';
    return subscribe >= 0 && subscribe < create
      ? 'createSession with the first message (a subscribe to the session before it)'
      : 'createSession when Claude was picked';
  }
}

// A benchmark, not a test (scripts/bench-vscode-open.sh; docs/BENCHMARKS.md, "VS Code opening
// a long session"): the real workbench opens a session restored from a long transcript
// (E2E_LONG_MB MB, the testkit's `long-transcript`), from a click in its sessions sidebar to the
// newest answer on screen. The oldest and newest turns are marked, so what VS Code holds can
// be told apart: the chat list's row count (`aria-setsize`) and whether the oldest turn, or
// the host's marker for the turns it left out, can be scrolled to.

import { test } from 'node:test';
import { Rig } from './harness.mjs';
import { chat, command, connected, shows } from './workbench.mjs';

const MB = process.env.E2E_LONG_MB ?? '100';
const OPENS = Number(process.env.E2E_LONG_OPENS ?? 2);
const OLDEST = 'The oldest turn of the long session';
const NEWEST = 'The newest answer of the long session';
// The first turn of a snapshot the host bounds (serve --chat-turns).
const MARKER = 'earlier turns of this session';

/** How many rows the open chat's list holds (VS Code's list tells screen readers). */
async function rows(page) {
  return chat(page)
    .locator('.monaco-list-row[aria-setsize]')
    .evaluateAll((rows) => Math.max(0, ...rows.map((r) => Number(r.getAttribute('aria-setsize')))));
}

test('VS Code opens a long session', async (t) => {
  // E2E_CHAT_TURNS: the host's bound (serve --chat-turns; 0 sends every turn).
  const hostEnv = process.env.E2E_CHAT_TURNS ? { CLAUDE_HOST_CHAT_TURNS: process.env.E2E_CHAT_TURNS } : {};
  const rig = await Rig.start(t, { signedIn: true, hostEnv });
  let passed = false;
  try {
    const session = await rig.host.longSession(Number(MB) * 1024 * 1024, {
      oldest: OLDEST,
      newest: `${NEWEST}.`,
    });
    // Each open in a window of its own: the first restores the session in the host, the
    // later ones find it open there.
    for (let open = 1; open <= OPENS; open++) {
      const page = await rig.browser.window(rig.codeServer.url());
      await rig.step(`window ${open} connects`, () => connected(page));
      await rig.step(`window ${open}: the sessions sidebar`, () =>
        command(page, 'Chat Agent Sessions: Show Agent Sessions Sidebar'),
      );
      const item = page.locator('.agent-session-title', { hasText: session.title }).first();
      await item.waitFor();
      const clicked = performance.now();
      await item.click();
      await rig.step(`open ${open}: the newest answer`, () => shows(page, NEWEST, 300_000));
      const painted = performance.now();
      console.log(`open ${open}: click → newest answer shown ${((painted - clicked) / 1000).toFixed(2)} s`);
      const held = await rows(page);
      // Turns pushed after the snapshot (if any) reach the list a moment later, or never.
      await new Promise((r) => setTimeout(r, 3_000));
      const later = await rows(page);
      // To the top of the chat: the list focused through an answer, then Home. (With every
      // turn of a long session VS Code may still be busy: then that is what is reported.)
      const focused = await chat(page)
        .getByText(NEWEST, { exact: false })
        .first()
        .click({ timeout: 30_000 })
        .then(() => true, () => false);
      if (!focused) {
        console.log(`open ${open}: the chat took no click within 30 s of showing the answer`);
        continue;
      }
      await page.keyboard.press('Home');
      const reachable = (text) =>
        chat(page)
          .getByText(text, { exact: false })
          .first()
          .waitFor({ timeout: 10_000 })
          .then(() => true, () => false);
      const marker = await reachable(MARKER);
      const oldest = await reachable(OLDEST);
      await rig.screenshots(`open-${open}-top`);
      console.log(
        `open ${open}: list rows when shown ${held}, 3 s later ${later}; at the top: the host's ` +
          `marker ${marker}, the oldest turn ${oldest}`,
      );
    }
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

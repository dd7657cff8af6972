// A session outlives the window and the host: a reload lists it and reopens it with its
// history; after a host restart VS Code reconnects and the conversation goes on.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { connected, openSession, pickClaude, send, shows } from './workbench.mjs';

test('reload restores the session; a host restart keeps its history', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'Remember the colour' }, { text: 'The colour is teal.' });
    await rig.fake.push({ lastUserContains: 'After the restart' }, { text: 'Still here after the restart.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('first turn', async () => {
      await send(page, 'Remember the colour teal');
      await shows(page, 'The colour is teal.');
    });
    const [session] = await waitFor(async () => {
      const s = await rig.host.sessions();
      return s.length === 1 && s;
    }, 'the session in `claude-host sessions list`');

    await rig.step('reload', async () => {
      const seen = page.consoleLines.length;
      await page.reload();
      await connected(page, seen);
    });
    await rig.step('listed, it reopens with its history', async () => {
      await openSession(page, 'Remember the colour teal');
      await shows(page, 'The colour is teal.');
    });
    await rig.screenshots('reopened');

    await rig.step('host restart', async () => {
      const seen = page.consoleLines.length;
      await rig.host.restart();
      await connected(page, seen);
    });
    await rig.step('the conversation goes on', async () => {
      await send(page, 'After the restart, still there?');
      await shows(page, 'Still here after the restart.');
      await shows(page, 'The colour is teal.');
    });
    await rig.step('the host has both turns in one session', async () => {
      const sessions = await rig.host.sessions();
      assert.equal(sessions.length, 1, JSON.stringify(sessions));
      assert.equal(sessions[0].id, session.id);
      const text = JSON.stringify(await rig.host.transcript(session.id));
      assert.ok(text.includes('The colour is teal.'), 'the first answer');
      assert.ok(text.includes('Still here after the restart.'), 'the second answer');
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

// A long session opens with its newest turns: VS Code pages nothing in, so the host sends it
// a chat's newest turns behind a first turn that says how many it left out (serve
// --chat-turns, here 4; docs/AHP.md, "Long sessions"). The conversation goes on from there
// and nothing of the older turns is lost.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig } from './harness.mjs';
import { chat, command, connected, send, shows } from './workbench.mjs';

const OLDEST = 'The oldest turn of the long session';
const NEWEST = 'The newest answer of the long session.';

test('a long session opens with its newest turns behind the host marker', async (t) => {
  const rig = await Rig.start(t, { signedIn: true, hostEnv: { CLAUDE_HOST_CHAT_TURNS: '4' } });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'After the long history' }, { text: 'Carrying on.' });
    // About a dozen turns.
    const session = await rig.host.longSession(300_000, { oldest: OLDEST, newest: NEWEST });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('open the session from the sidebar', async () => {
      await command(page, 'Chat Agent Sessions: Show Agent Sessions Sidebar');
      await page.locator('.agent-session-title', { hasText: session.title }).first().click();
      await shows(page, NEWEST);
    });
    await rig.step('at the top, the marker instead of the older turns', async () => {
      await chat(page).getByText(NEWEST).first().click();
      await page.keyboard.press('Home');
      await shows(page, 'earlier turns of this session');
      assert.equal(await chat(page).getByText(OLDEST).count(), 0, 'the oldest turn is not sent');
    });
    await rig.step('the conversation goes on', async () => {
      await send(page, 'After the long history, carry on');
      await shows(page, 'Carrying on.');
    });
    await rig.step('the session still has every turn', async () => {
      const text = JSON.stringify(await rig.host.transcript(session.id));
      assert.ok(text.includes(OLDEST), 'the oldest turn');
      assert.ok(text.includes('Carrying on.'), 'the new answer');
      const log = rig.logs.host.join('');
      assert.ok(!log.includes('action=chat/truncated'), 'VS Code truncated nothing');
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

// Stop: a turn whose model call hangs is cancelled from VS Code's input; the chat is usable
// again at once and the next turn runs.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

test('stop cancels a running turn and the next one runs', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'Take your time' }, { slowText: { text: 'Too late to matter.', ms: 120_000 } });
    await rig.fake.push({ lastUserContains: 'After the stop' }, { text: 'Answered after the stop.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Take your time with this one'));
    const stop = page.locator('.interactive-input-part [aria-label^="Cancel"]').first();
    await rig.step('the model call is under way', async () => {
      await stop.waitFor();
      await waitFor(async () => (await rig.fake.lastUserTexts()).some((t) => t.includes('Take your time')), 'the model request');
    });
    await rig.step('stop', () => stop.click());
    await rig.step('the turn ends', () => stop.waitFor({ state: 'hidden' }));
    assert.equal(await chat(page).getByText('Too late to matter.').count(), 0);
    await rig.step('the next turn runs', async () => {
      await send(page, 'After the stop, answer this');
      await shows(page, 'Answered after the stop.');
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

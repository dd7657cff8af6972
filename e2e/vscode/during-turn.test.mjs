// A message typed while a turn runs: VS Code 1.139.1 sends it as steering
// (`chat/pendingMessageSet`); Claude Code takes it at once (it cuts the model call under way and
// asks again with the message in view), and the answer to it shows in the same response.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { connected, pickClaude, send, shows } from './workbench.mjs';

test('a message typed during a turn', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'Write the report' }, { slowText: { text: 'The report is written.', ms: 8_000 } });
    await rig.fake.push({ lastUserContains: 'bananas' }, { text: 'Bananas are in it too.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Write the report'));
    await rig.step('the model call is under way', () =>
      waitFor(async () => (await rig.fake.lastUserTexts()).some((t) => t.includes('Write the report')), 'the model request'));
    await rig.step('type during the turn', () => send(page, 'Also mention bananas'));
    await rig.step('the message reached Claude', () =>
      waitFor(async () => (await rig.fake.lastUserTexts()).some((t) => t.includes('bananas')), 'a model request with the message'));
    await rig.step('its answer', () => shows(page, 'Bananas are in it too.'));
    // How VS Code sent it, from the host's log of dispatched actions.
    const log = rig.logs.host.join('');
    const how = log.includes('action=chat/pendingMessageSet') ? 'pending message' : 'new turn';
    t.diagnostic(`VS Code sent the message as a ${how}`);
    assert.ok(!log.includes('no turn is running to steer'), 'a refused steering message');
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

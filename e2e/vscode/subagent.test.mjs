// A subagent (Claude Code's Agent tool) shown in VS Code: its part in the turn links to a chat
// of its own, which VS Code subscribes to. (Opening that chat from the part's pill did nothing
// in the headless workbench; docs/AHP.md, "The real VS Code".)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

test('a subagent shown as its own chat', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push(
      { lastUserContains: 'Ask a helper' },
      {
        toolUse: {
          name: 'Agent',
          input: {
            description: 'Greet the user',
            prompt: 'SUBPROMPT say hello',
            subagent_type: 'general-purpose',
            // Claude Code runs an agent in the background unless told otherwise.
            run_in_background: false,
          },
        },
      },
    );
    await rig.fake.push({ lastUserContains: 'SUBPROMPT' }, { text: 'The helper says hello.' });
    await rig.fake.push('toolResult', { text: 'The helper is done.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Ask a helper'));
    await rig.step('the turn ends', () => shows(page, 'The helper is done.'));
    const part = chat(page).locator('.chat-subagent-part').first();
    await rig.step('the subagent has its part, linked to its chat', async () => {
      await part.waitFor();
      await waitFor(
        () => part.evaluate((el) => el.classList.contains('chat-subagent-has-chat')),
        'the subagent part to link to a chat',
      );
      assert.match(await part.innerText(), /Greet the user/);
    });
    await rig.step('VS Code follows the subagent on its own chat channel', async () => {
      const log = rig.logs.host.join('');
      assert.match(log, /method=subscribe channel=ahp-chat:\/\/subagent\/\S+\/toolu_/);
      // The session's chat shows the subagent as a link to its chat, not what it said.
      assert.equal(await page.getByText('The helper says hello.', { exact: false }).count(), 0);
    });
    await rig.step("the host has the subagent's transcript", async () => {
      const text = JSON.stringify(await rig.host.toolResults());
      assert.ok(text.includes('The helper says hello.'), text);
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

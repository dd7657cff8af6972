// Claude's AskUserQuestion answered in VS Code's question card: the choice reaches Claude
// as the tool's result.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

test('a question answered in VS Code', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push(
      { lastUserContains: 'Set up the database' },
      {
        toolUse: {
          name: 'AskUserQuestion',
          input: {
            questions: [{
              question: 'Which database should I use?',
              header: 'Database',
              options: [{ label: 'Postgres', description: 'A server' }, { label: 'SQLite', description: 'A file' }],
              multiSelect: false,
            }],
          },
        },
      },
    );
    await rig.fake.push('toolResult', { text: 'Going with your choice.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Set up the database'));
    const card = chat(page).locator('.chat-question-carousel-container').first();
    await rig.step('the question card', () => card.waitFor());
    await rig.step('choose SQLite and submit', async () => {
      await card.locator('.chat-question-list-item', { hasText: 'SQLite' }).click();
      // A one-question card may take the choice at once; otherwise it is submitted.
      const submit = page.locator('.chat-question-submit-button').first();
      if (await submit.isVisible()) await submit.click();
    });
    await rig.step('Claude goes on', () => shows(page, 'Going with your choice.'));
    await rig.step('the answer is the tool result in the transcript', async () => {
      const text = JSON.stringify(await rig.host.toolResults());
      assert.ok(text.includes('SQLite'), text);
      assert.ok(!text.includes('"Postgres"'), text);
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

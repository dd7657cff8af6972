// The first turn, in a VS Code with no GitHub session and without
// `chat.allowAnonymousAccess`, against a host that holds a credential: Claude must be usable
// (the host lists the GitHub resource as not required while it is signed in).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { connected, pageHas, pickClaude, send, shows } from './workbench.mjs';

test('first turn in a VS Code without a GitHub session, the host signed in', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push('always', { text: 'Hello from Claude through claude-host.' }, 100);
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Say hello'));
    await rig.step('the answer streams in', () => shows(page, 'Hello from Claude through claude-host.'));
    await rig.step('no sign-in asked', async () => {
      assert.equal(await pageHas(page, 'Sign in to use GitHub Copilot'), false);
      assert.ok(
        !page.consoleLines.some((l) => l.includes('Authentication required')),
        'no createSession refused for a missing sign-in',
      );
    });
    await rig.step('the host ran it', async () => {
      assert.ok((await rig.fake.lastUserTexts()).some((t) => t.includes('Say hello')));
      const sessions = await waitFor(async () => {
        const s = await rig.host.sessions();
        return s.length === 1 && s;
      }, 'one session in `claude-host sessions list`');
      assert.equal(sessions[0].first_prompt, 'Say hello');
      const entries = await rig.host.transcript(sessions[0].id);
      assert.ok(
        JSON.stringify(entries).includes('Hello from Claude through claude-host.'),
        'the answer is in the transcript',
      );
    });
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

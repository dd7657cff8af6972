// `@` and `/` in the chat input: the host completes the session's files and Claude Code's
// commands.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Rig } from './harness.mjs';
import { connected, pickClaude, send, shows } from './workbench.mjs';

test('@ and / completions in the chat input', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    writeFileSync(join(rig.host.work, 'release-notes.md'), '# Release notes\n');
    await rig.fake.push('always', { text: 'Noted.' }, 10);
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    const rows = page.locator('.suggest-widget .monaco-list-row');
    await rig.step('@ lists the file', async () => {
      await page.locator('.interactive-input-part .monaco-editor').first().click();
      await page.keyboard.type('@release');
      const file = rows.filter({ hasText: 'release-notes.md' }).first();
      // The suggestions open as the text is typed; when typing outran them, they are asked for.
      if (!(await file.waitFor({ timeout: 5_000 }).then(() => true, () => false))) {
        await page.keyboard.press('Control+Space');
      }
      await file.waitFor();
    });
    assert.ok(
      rig.logs.host.join('').includes('method=completions'),
      'the host answered a `completions` request',
    );
    await rig.step('a turn', async () => {
      await page.keyboard.press('Escape');
      await page.keyboard.press('Control+A');
      await page.keyboard.press('Backspace');
      await send(page, 'Hello first');
      await shows(page, 'Noted.');
    });
    await rig.step('/ lists Claude Code commands', async () => {
      await page.locator('.interactive-input-part .monaco-editor').first().click();
      await page.keyboard.type('/');
      if (!(await rows.first().waitFor({ timeout: 5_000 }).then(() => true, () => false))) {
        await page.keyboard.press('Control+Space');
      }
      await rows.first().waitFor();
    });
    const listed = await rows.allInnerTexts();
    assert.ok(listed.some((r) => /compact|context|init|review/i.test(r)), JSON.stringify(listed));
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

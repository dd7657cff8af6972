// What Claude changed, as VS Code shows it: the turn's "1 file changed" list opens a diff of
// the file, both sides read from the host (the file before the turn, and now); the input's
// session-changes pill opens the multi-diff of the whole session.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Rig, waitFor } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

/** Waits until the diff editor in `scope` reads `before` on its left and `after` on its right. */
async function diffReads(scope, before, after) {
  const side = (which) =>
    scope.locator(`.${which}-in-monaco-diff-editor .view-lines`).first().innerText().catch(() => '');
  const flat = (s) => s.replace(/\s+/g, ' ').trim();
  await waitFor(
    async () => flat(await side('original')) === before && flat(await side('modified')) === after,
    `a diff of "${before}" against "${after}"`,
  );
  assert.ok((await scope.locator('.line-insert').count()) > 0, 'the added line is marked');
}

test('the changed file opens as a diff, alone and in the session changes', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    const notes = join(rig.host.work, 'notes.txt');
    writeFileSync(notes, 'one\n');
    await rig.fake.push({ lastUserContains: 'edit notes' }, { toolUse: { name: 'Write', input: { file_path: notes, content: 'one\ntwo\n' } } });
    await rig.fake.push({ lastUserContains: 'successfully' }, { text: 'Edited notes.txt.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Please edit notes.txt'));
    await rig.step('allow the edit', () =>
      chat(page).getByRole('button', { name: 'Allow', exact: true }).first().click());
    await rig.step('the answer', () => shows(page, 'Edited notes.txt.'));

    await rig.step("the turn's changed file as a diff", async () => {
      const summary = chat(page).locator('.checkpoint-file-changes-summary').last();
      await summary.locator('.chat-file-changes-label', { hasText: '1 file changed' }).click();
      await summary.locator('.monaco-list-row', { hasText: 'notes.txt' }).first().click();
      await page.locator('.tabs-container .tab', { hasText: 'notes.txt ↔ notes.txt' }).first().waitFor();
      await diffReads(page.locator('.editor-group-container .monaco-diff-editor').first(), 'one', 'one two');
    });
    await rig.screenshots('turn-diff');

    // VS Code shows the session-changes pill only when it created the session as Claude was
    // picked (docs/AHP.md, "The session-changes pill").
    const flow = rig.newChatFlow();
    if (flow.startsWith('createSession when Claude was picked')) {
      await rig.step('the session changes', async () => {
        const pill = page.getByRole('button', { name: 'View Session changes' }).first();
        await waitFor(async () => (await pill.innerText()).includes('1 File'), 'the pill to count one file');
        await pill.click();
        await page.locator('.tabs-container .tab', { hasText: 'Session changes (1 file)' }).first().waitFor();
        await diffReads(page.locator('.multiDiffEditor .multiDiffEntry').first(), 'one', 'one two');
      });
      await rig.screenshots('session-changes');
    } else {
      console.error(`vscode-e2e: no session-changes pill to check (VS Code started the chat by ${flow})`);
    }
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

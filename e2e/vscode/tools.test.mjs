// Tool confirmations as VS Code shows them: Claude's Write asks, "Allow" writes the file and
// the turn shows it changed; a refusal leaves the disk alone and Claude hears of it.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Rig } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

test('a tool confirmation allowed, then one denied', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    const allowed = join(rig.host.work, 'allowed.txt');
    const denied = join(rig.host.work, 'denied.txt');
    await rig.fake.push({ lastUserContains: 'write allowed' }, { toolUse: { name: 'Write', input: { file_path: allowed, content: 'hello\n' } } });
    await rig.fake.push({ lastUserContains: 'File created successfully' }, { text: 'Wrote allowed.txt.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('send', () => send(page, 'Please write allowed.txt'));
    const allow = chat(page).getByRole('button', { name: 'Allow', exact: true }).first();
    await rig.step('the confirmation', () => allow.waitFor());
    await rig.screenshots('confirmation');
    assert.equal(existsSync(allowed), false, 'nothing written before the answer');
    await rig.step('allow', () => allow.click());
    await rig.step('the answer after the tool', () => shows(page, 'Wrote allowed.txt.'));
    assert.equal(readFileSync(allowed, 'utf8'), 'hello\n');
    await rig.screenshots('allowed');

    await rig.fake.push({ lastUserContains: 'write denied' }, { toolUse: { name: 'Write', input: { file_path: denied, content: 'no\n' } } });
    await rig.fake.push('toolResult', { text: 'Understood, not written.' });
    await rig.step('send again', () => send(page, 'Please write denied.txt'));
    await rig.step('the second confirmation', () => allow.waitFor());
    await rig.step('skip it', async () => {
      await chat(page).getByRole('button', { name: 'Skip All' }).first().click();
    });
    await rig.step('Claude hears of the refusal', () => shows(page, 'Understood, not written.'));
    assert.equal(existsSync(denied), false, 'a refused Write leaves the disk alone');
    const texts = await rig.fake.lastUserTexts();
    assert.ok(texts.length >= 4, JSON.stringify(texts));
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

// Switching the model in VS Code's picker: the next turn's model call goes to that model.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Rig, waitFor } from './harness.mjs';
import { connected, pickClaude, send, shows } from './workbench.mjs';

/** The models of the host's user-prompt model calls so far (its proxy's log lines). */
function promptModels(rig) {
  return rig.logs.host
    .join('')
    .split('\n')
    .filter((l) => l.includes('POST /v1/messages') && l.includes('kind=prompt'))
    .map((l) => l.match(/ model=(\S+)/)?.[1]);
}

test('switching the model in the picker', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    await rig.fake.push({ lastUserContains: 'First question' }, { text: 'First answer.' });
    await rig.fake.push({ lastUserContains: 'Second question' }, { text: 'Second answer.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('a turn on the default model', async () => {
      await send(page, 'First question');
      await shows(page, 'First answer.');
    });
    const first = await waitFor(() => promptModels(rig)[0], 'the first model call in the host log');
    await rig.step('pick Claude Sonnet 4.5', async () => {
      await page.locator('.interactive-input-part [aria-label^="Models,"]').first().click();
      await page.locator('.action-widget .monaco-list-row', { hasText: 'Other Models' }).first().click();
      await page.locator('.action-widget .monaco-list-row', { hasText: /^Claude Sonnet 4\.5$/ }).first().click();
      await page.locator('.interactive-input-part [aria-label="Models, Claude Sonnet 4.5"]').first().waitFor();
    });
    await rig.step('the next turn', async () => {
      await send(page, 'Second question');
      await shows(page, 'Second answer.');
    });
    const models = await waitFor(() => {
      const m = promptModels(rig);
      return m.length >= 2 && m;
    }, 'the second model call in the host log');
    assert.notEqual(first, 'claude-sonnet-4.5', 'the first turn ran on another model');
    assert.equal(models.at(-1), 'claude-sonnet-4.5', JSON.stringify(models));
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

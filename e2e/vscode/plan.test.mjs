// Plan mode as VS Code offers it: "Plan only" picked in the input's permissions chip, Claude's
// ExitPlanMode shows as a confirmation with the plan; approving it lets Claude edit without
// asking again (the session goes to "Accept edits", which the chip then shows).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Rig, waitFor } from './harness.mjs';
import { chat, connected, pickClaude, send, shows } from './workbench.mjs';

/** The input's permissions chip (its label names the mode). */
function permissions(page) {
  return page.locator('.interactive-input-part [aria-label^="Permissions:"]').first();
}

test('a plan approved in VS Code, then carried out', async (t) => {
  const rig = await Rig.start(t, { signedIn: true });
  let passed = false;
  try {
    const planned = join(rig.host.work, 'plan.txt');
    await rig.fake.push({ lastUserContains: 'make a plan' }, { toolUse: { name: 'ExitPlanMode', input: { plan: '1. Write plan.txt with the word planned' } } });
    await rig.fake.push({ lastUserContains: 'approved' }, { toolUse: { name: 'Write', input: { file_path: planned, content: 'planned\n' } } });
    await rig.fake.push({ lastUserContains: 'successfully' }, { text: 'Plan carried out.' });
    const page = await rig.browser.window(rig.codeServer.url());
    await rig.step('connect', () => connected(page));
    await rig.step('pick Claude', () => pickClaude(page));
    await rig.step('pick "Plan only"', async () => {
      await permissions(page).click();
      await page.locator('.action-widget .monaco-list-row', { hasText: 'Plan only' }).first().click();
      await waitFor(async () => (await permissions(page).getAttribute('aria-label'))?.includes('Plan only'), 'the chip to say Plan only');
    });
    await rig.step('send', () => send(page, 'Please make a plan, then do it'));
    // VS Code docks the confirmation above the input, the plan as markdown under its title.
    const card = page.locator('.interactive-input-part', { hasText: 'Approve this plan and start editing?' }).first();
    await rig.step('the plan to approve', async () => {
      await card.getByText('Write plan.txt with the word planned').first().waitFor();
    });
    await rig.screenshots('plan');
    assert.equal(existsSync(planned), false, 'nothing written while planning');
    await rig.step('approve', () =>
      card.locator('.monaco-button', { hasText: 'Allow in this Session' }).first().click());
    // The Write after the plan asks nothing: the answer comes without another click.
    await rig.step('Claude carries it out', () => shows(page, 'Plan carried out.'));
    assert.equal(readFileSync(planned, 'utf8'), 'planned\n');
    await rig.step('the session accepts edits now', () =>
      waitFor(async () => (await permissions(page).getAttribute('aria-label'))?.includes('Accept edits'), 'the chip to say Accept edits'));
    passed = true;
  } finally {
    await rig.close(passed);
  }
});

// What a user does in VS Code 1.139.1's workbench, as DOM steps (selectors as
// ../shared/reference/vscode-client.md §17 found them).

import { WAIT, waitFor } from './harness.mjs';

/** Waits for the workbench's agent-host client to be connected to claude-host. */
export async function connected(page, after = 0) {
  await waitFor(
    () =>
      page.consoleLines.slice(after).some((l) => l.includes('[AgentHost:remote] Connected')),
    'the agent host connection ([AgentHost:remote] Connected)',
  );
}

/** The chat view's session panel (the open chat). */
export function chat(page) {
  return page.locator('.interactive-session').first();
}

/** Picks "Claude" in the chat input's session-type picker (a new Claude chat). */
export async function pickClaude(page) {
  await page.locator('.chat-session-target-picker-item').first().click();
  const row = page.locator('.action-widget .monaco-list-row', { hasText: 'Claude' });
  await row.waitFor({ timeout: WAIT });
  const disabled = await row.evaluate(
    (el) => el.classList.contains('disabled') || el.getAttribute('aria-disabled') === 'true',
  );
  if (disabled) throw new Error('"Claude" is greyed out in the session-type picker');
  await row.click();
  await waitFor(
    async () => (await page.locator('.chat-session-target-picker-item').first().innerText()).includes('Claude'),
    'the picker to show Claude',
  );
}

/** Types `text` into the chat input and sends it. */
export async function send(page, text) {
  const input = page.locator('.interactive-input-part .monaco-editor').first();
  await input.click();
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

/** Waits until the open chat shows `text`. */
export async function shows(page, text, ms = WAIT) {
  await chat(page).getByText(text, { exact: false }).first().waitFor({ timeout: ms });
}

/** Whether any part of the page shows `text` now. */
export async function pageHas(page, text) {
  return (await page.getByText(text, { exact: false }).count()) > 0;
}

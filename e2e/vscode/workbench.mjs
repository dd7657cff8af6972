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
  const row = page.locator('.action-widget .monaco-list-row', { hasText: 'Claude' });
  // The agent appears in the picker a moment after the connection; an open list is not
  // refreshed, so it is opened again until it lists Claude.
  await waitFor(async () => {
    await page.locator('.chat-session-target-picker-item').first().click();
    if (await row.waitFor({ timeout: 2_000 }).then(() => true, () => false)) return true;
    await page.keyboard.press('Escape');
    return false;
  }, 'Claude in the session-type picker');
  const disabled = await row.evaluate(
    (el) => el.classList.contains('disabled') || el.getAttribute('aria-disabled') === 'true',
  );
  const text = await row.innerText();
  if (disabled || /sign in/i.test(text)) {
    throw new Error(`"Claude" is greyed out in the session-type picker: ${JSON.stringify(text)}`);
  }
  await row.click();
  // The picker shows "Claude" only until the new session is created; then VS Code 1.139.1
  // renders it without a label and the input says "Chat with Claude" instead. Either proves
  // the pick (polling for the label alone missed the window now and then).
  await waitFor(async () => {
    const picker = await page.locator('.chat-session-target-picker-item').allInnerTexts();
    const input = await page.locator('.interactive-input-part').first().innerText().catch(() => '');
    return picker.some((t) => t.includes('Claude')) || input.includes('Chat with Claude');
  }, 'the picker or the chat input to show Claude');
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

/** Runs a command from the command palette by its full title. */
export async function command(page, title) {
  await page.keyboard.press('F1');
  await page.keyboard.type(title);
  await page.locator('.quick-input-list .monaco-list-row', { hasText: title }).first().waitFor();
  await page.keyboard.press('Enter');
}

/** Opens the agent sessions list and the session titled `title` from it. */
export async function openSession(page, title) {
  await command(page, 'Chat Agent Sessions: Show Agent Sessions Sidebar');
  const item = page.locator('.agent-session-title', { hasText: title }).first();
  await item.waitFor();
  await item.click();
}
